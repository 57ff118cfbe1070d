"""A really starved loop (a task blocks it with a synchronous sleep, nothing mocked) never
turns our lateness into a verdict on a server (``_policy/lateness.py``):

- a healthy loopback server is never reported unreachable, and a late model list is no
  "models problem": the probe gives no verdict;
- a server that really stopped answering is still judged, by the next probe on time;
- a server listening on loopback only is never exposed by a connect our stall timed out,
  while one really listening beyond loopback (here ``127.0.0.2`` stands for the LAN, as in
  ``tests/conftest.py``) is still found exposed under the same stall.
"""

from __future__ import annotations

import functools
import os
import socket
import time

import pytest
import trio

from edges.hostile_server_support import Reply, hostile_server
from edges.keepalive_support import MODELS, keepalive_server
from inferactors._edges.netcheck import connect_reach
from inferactors._edges.netscan import LAN_ADDRESSES_ENV, SystemNetScanner
from inferactors._edges.probe import ProbeClient
from inferactors._errors import DeepHealthTimeout, NoVerdict
from inferactors._flavor import InferFlavor
from inferactors._policy.lateness import LATE_S, Reach
from inferactors._policy.probe_report import Unreachable, Up

TIMEOUT_S = 0.3
BLOCK_S = TIMEOUT_S + LATE_S + 0.3


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAN_ADDRESSES_ENV, "127.0.0.2")


async def _starve(seconds: float, *, after_s: float = 0.0) -> None:
    await trio.sleep(after_s)
    time.sleep(seconds)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


async def _starve_once_asked(requests: list[str], request: str) -> None:
    """Starve the loop for `BLOCK_S` as soon as the server has ``request`` (while its reply
    trickles), whatever the machine's load made of the steps before."""
    while request not in requests:  # noqa: ASYNC110 (the test server keeps a list, no event)
        await trio.sleep(0.001)
    time.sleep(BLOCK_S)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


async def _silent(stream: trio.SocketStream) -> None:
    async with stream:
        await trio.sleep_forever()


async def test_a_healthy_server_probed_through_a_stall_gets_no_verdict_never_unreachable() -> None:
    async with (
        keepalive_server() as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
        trio.open_nursery() as nursery,
    ):
        assert (await probe.report(InferFlavor.LLAMACPP)).health == Up()
        for _ in range(3):
            nursery.start_soon(_starve, BLOCK_S)
            report = await probe.report(InferFlavor.LLAMACPP)
            assert report.health == Up() or report.no_verdict, report
            await trio.sleep(0.05)


async def test_a_late_model_list_is_no_verdict_not_a_models_problem() -> None:
    replies = {"/health": Reply(body=b"{}"), "/v1/models": Reply(body=MODELS, pause_s=0.05)}
    async with (
        hostile_server(replies) as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_starve_once_asked, server.requests, "GET /v1/models")
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.no_verdict
    assert report.models_problem is None
    assert isinstance(report.health, Unreachable)
    assert "GET /v1/models: no verdict: inferactors' event loop ran" in report.health.why


async def test_a_server_that_stopped_answering_is_judged_on_the_next_probe_on_time() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, _silent, 0))
        port = listeners[0].socket.getsockname()[1]
        async with ProbeClient.open(f"http://127.0.0.1:{port}", timeout_s=TIMEOUT_S) as probe:
            nursery.start_soon(functools.partial(_starve, BLOCK_S, after_s=0.02))
            starved = await probe.report(InferFlavor.LLAMACPP)
            judged = await probe.report(InferFlavor.LLAMACPP)
        nursery.cancel_scope.cancel()
    assert starved.no_verdict
    assert judged.health == Unreachable(f"GET /health: no complete reply within {TIMEOUT_S:g} s")
    assert not judged.no_verdict


def _listener(host: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(8)
    return sock


async def test_a_connect_our_stall_timed_out_is_never_reachable() -> None:
    with _listener("127.0.0.1") as loopback_only:  # nothing on the "LAN" address
        port = loopback_only.getsockname()[1]
        for _ in range(3):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_starve, BLOCK_S)
                reach = await connect_reach("127.0.0.2", port, timeout_s=TIMEOUT_S)
            assert reach is not Reach.REACHABLE


@pytest.mark.parametrize(("host", "exposed"), [("127.0.0.1", False), ("0.0.0.0", True)])
async def test_the_exposure_scan_through_a_stall_finds_only_what_is_really_exposed(
    host: str, exposed: bool
) -> None:
    scanner = SystemNetScanner()
    with _listener(host) as listening:  # held by this process: its tree is ours
        port = listening.getsockname()[1]
        for _ in range(3):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_starve, BLOCK_S)
                exposure = await scanner.scan(os.getpid(), port)
            assert (exposure is not None) is exposed, exposure


async def test_a_completion_our_stall_timed_out_is_no_verdict_not_a_timeout() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, _silent, 0))
        port = listeners[0].socket.getsockname()[1]
        async with ProbeClient.open(f"http://127.0.0.1:{port}", timeout_s=TIMEOUT_S) as probe:
            nursery.start_soon(functools.partial(_starve, BLOCK_S, after_s=0.02))
            lost = r"^deep health: POST /v1/chat/completions: no verdict"
            with pytest.raises(NoVerdict, match=lost):
                await probe.tiny_completion(None)
            with pytest.raises(DeepHealthTimeout):  # on time: the server's own silence
                await probe.tiny_completion(None)
        nursery.cancel_scope.cancel()
