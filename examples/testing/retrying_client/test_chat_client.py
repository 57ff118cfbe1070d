"""The retrying client against inferactors' fake llama-server: a real process on a free port
that plays the faults of the test's ``inferactors_faults`` marker. No runtime, no conftest:
``pip install -e '/path/to/clone[testing]'`` brings the fixtures (inferactors is not on PyPI)."""

from __future__ import annotations

import threading

import pytest
from chat_client import ServerUnavailable, ask

from inferactors.testing import CrashAt, FakeServer, Status503, Timeline


def test_the_client_gets_one_token(fake_llama_server: FakeServer) -> None:
    assert ask(fake_llama_server.base_url, "the cat") == " and"


# 3 s from the fake's start: room for a busy machine between the start and the first request
@pytest.mark.inferactors_faults(Status503(for_s=3.0))
def test_the_client_waits_out_a_loading_server(fake_llama_server: FakeServer) -> None:
    assert ask(fake_llama_server.base_url, "the cat", attempts=100) == " and"
    asked = [r for r in fake_llama_server.requests() if r.path == "/v1/chat/completions"]
    assert len(asked) > 1  # the first ones met 503


@pytest.mark.inferactors_faults(CrashAt(request=1))
def test_a_crash_is_reported_not_hung(fake_llama_server: FakeServer) -> None:
    with pytest.raises(ServerUnavailable, match="after 3 attempts"):
        ask(fake_llama_server.base_url, "the cat", attempts=3)
    assert fake_llama_server.returncode() == -9  # killed, as by the OOM killer


@pytest.mark.inferactors_faults(CrashAt(request=1))
def test_the_client_reaches_the_server_once_it_is_back(fake_llama_server: FakeServer) -> None:
    back = threading.Timer(0.5, fake_llama_server.restart, (Timeline(),))
    back.start()
    try:
        assert ask(fake_llama_server.base_url, "the cat", attempts=200, pause_s=0.05) == " and"
    finally:
        back.join()
