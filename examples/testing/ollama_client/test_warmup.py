"""The warm-up against inferactors' fake Ollama (a real process on a free port), with the
official ``ollama`` client, fault-free and with field case FC-19 (the load timeout)."""

from __future__ import annotations

import ollama
import pytest
from warmup import ModelWontLoad, warm_up

from inferactors.testing import FakeOllamaServer, LoadTimeout


def test_a_model_warms_up(fake_ollama: FakeOllamaServer) -> None:
    assert warm_up(fake_ollama.base_url, "tiny") == ["tiny:latest"]


@pytest.mark.inferactors_faults("FC-19")
def test_a_load_timeout_is_told_apart(fake_ollama: FakeOllamaServer) -> None:
    with pytest.raises(ModelWontLoad, match="timed out waiting for llama runner"):
        warm_up(fake_ollama.base_url, "tiny")


@pytest.mark.inferactors_faults(LoadTimeout(message="out of memory"))
def test_any_other_failure_stays_a_response_error(fake_ollama: FakeOllamaServer) -> None:
    with pytest.raises(ollama.ResponseError, match="out of memory"):
        warm_up(fake_ollama.base_url, "tiny")


def test_an_unknown_model_is_a_response_error(fake_ollama: FakeOllamaServer) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        warm_up(fake_ollama.base_url, "huge")
    assert refused.value.status_code == 404
