"""One deadline per public call, against a real loopback server that trickles its replies.

Each reply below comes 0.2 s at a time and takes 0.8 s: under the 1 s timeout, so a
deadline per request never fires and a call of three requests would take 2.4 s. With one
deadline for the whole call, every call is over by about 1 s: a probe report (llama.cpp and
Ollama), the Ollama survey behind status and health, the one-token deep health of both
workers, and the facade's ``status``, ``health`` and ``deep_health`` on an adopted server.
A body trickled a byte every 0.2 s without end fails its probe after 1 s.

Real time (trio's default clock), so the bounds leave room for a loaded machine: a call
must end within `LATE_S`, while the per-request behaviour would take 1.6 s or more. Not
``exclusive``: the server and the client share one event loop in this process, so only
that loop's own lateness moves a call's end (a few milliseconds seen on a loaded shared
machine), against 0.45 s of room.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import trio

from edges.hostile_server_support import Reply, hostile_server
from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs, open_runtime
from inferactors._actors.messages import Reply as Answer
from inferactors._actors.ollama.work import OllamaWork, open_ollama_client, survey
from inferactors._edges.ollama_client import OllamaClient
from inferactors._edges.probe import ProbeClient
from inferactors._errors import DeepHealthTimeout
from inferactors._policy.probe_report import CompletionResult, Unreachable, Up

T = TypeVar("T")

TIMEOUT_S = 1.0
LATE_S = 1.45
"""Latest acceptable end of a call with a 1 s deadline (per-request deadlines: >= 1.6 s)."""

MODELS = json.dumps({"object": "list", "data": [{"id": "tiny.gguf"}]}).encode()
TAGS = json.dumps({"models": [{"name": "tiny:latest", "model": "tiny:latest"}]}).encode()
COMPLETION = json.dumps(
    {"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]}
).encode()


def trickled(body: bytes) -> Reply:
    """``body`` in four pieces 0.2 s apart: the whole reply takes 0.8 s."""
    return Reply(body=body, chunk=-(-len(body) // 4), pause_s=0.2)


LLAMA = {
    "/health": trickled(b'{"status": "ok"}'),
    "/v1/models": trickled(MODELS),
    "/v1/chat/completions": trickled(COMPLETION),
}
OLLAMA = {
    "/api/version": trickled(b'{"version": "0.5.1"}'),
    "/api/tags": trickled(TAGS),
    "/api/ps": trickled(TAGS),
    "/v1/chat/completions": trickled(COMPLETION),
}


async def timed(call: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    started = trio.current_time()
    result = await call()
    return result, trio.current_time() - started


async def test_a_byte_every_0_2_s_fails_the_probe_after_1_s() -> None:
    endless = Reply(body=b"x" * 1000, chunk=1, pause_s=0.2)
    async with (
        hostile_server({"/health": endless}) as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
    ):
        report, took = await timed(lambda: probe.report(InferFlavor.LLAMACPP))
    assert report.health == Unreachable("GET /health: no complete reply within 1 s")
    assert 0.95 <= took < LATE_S


async def test_a_model_list_cut_off_by_the_probe_deadline_says_how_long_it_had() -> None:
    """A healthy but slow server (each reply whole after 0.6 s): ``/health`` takes 0.6 s of
    the probe's one 1 s deadline, and the model list is cut off 0.4 s later. Its words say
    it had what was left, not the whole second (before: "no complete reply within 1 s")."""
    slow = {
        "/health": Reply(body=b'{"status": "ok"}', pause_s=0.6),
        "/v1/models": Reply(body=MODELS, pause_s=0.6),
    }
    async with (
        hostile_server(slow) as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
    ):
        report, took = await timed(lambda: probe.report(InferFlavor.LLAMACPP))
    assert (report.health, report.models) == (Up(), ())
    problem = report.models_problem or ""
    prefix = "model list unreadable: GET /v1/models: no complete reply within the 0."
    assert problem.startswith(prefix), problem
    assert problem.endswith(" s left of the probe's 1 s"), problem
    left = float(problem.removeprefix(prefix[:-2]).split(" ")[0])
    assert 0.0 < left <= 0.4  # what /health left of the second
    assert 0.95 <= took < LATE_S


async def test_a_llama_report_spends_one_deadline_on_all_its_requests() -> None:
    async with (
        hostile_server(LLAMA) as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
    ):
        report, took = await timed(lambda: probe.report(InferFlavor.LLAMACPP))
        async with ProbeClient.open(server.base_url, timeout_s=3.0) as patient:
            whole, whole_took = await timed(lambda: patient.report(InferFlavor.LLAMACPP))
    assert (report.health, report.models) == (Up(), ())  # the list was cut off at 1 s
    assert 0.95 <= took < LATE_S
    assert (whole.health, whole.models) == (Up(), ("tiny.gguf",))  # each reply is valid
    assert whole_took >= 1.55  # and two of them take 1.6 s


async def test_an_ollama_report_spends_one_deadline_on_its_three_requests() -> None:
    async with (
        hostile_server(OLLAMA) as server,
        ProbeClient.open(server.base_url, timeout_s=TIMEOUT_S) as probe,
    ):
        report, took = await timed(lambda: probe.report(InferFlavor.OLLAMA))
    assert (report.health, report.models, report.loaded) == (Up(), (), ())
    assert took < LATE_S


async def test_the_ollama_survey_spends_one_deadline_on_its_three_requests() -> None:
    async with (
        hostile_server(OLLAMA) as server,
        OllamaClient.open(server.base_url, timeout_s=TIMEOUT_S) as api,
    ):
        found, took = await timed(lambda: survey(api, TIMEOUT_S))
    assert (found.health, found.version) == (Up(), "0.5.1")
    assert (found.pulled, found.resident) == (None, None)  # unknown: cut off, not empty
    assert took < LATE_S


async def test_the_ollama_deep_health_spends_one_deadline_on_ps_and_the_completion() -> None:
    async with hostile_server(OLLAMA) as server:
        send, receive = trio.open_memory_channel[Answer[CompletionResult]](1)
        work = OllamaWork(
            server.base_url, "tiny", "30m", TIMEOUT_S, 60.0, TIMEOUT_S, 2.0,
            open_ollama_client, trio.open_memory_channel[object](1)[0],
        )  # fmt: skip
        _, took = await timed(lambda: work.deep_health(send))
        answer = await receive.receive()
    assert isinstance(answer.error, DeepHealthTimeout)
    assert str(answer.error) == "deep health: no complete answer within 1 s"
    assert took < LATE_S


@pytest.mark.parametrize("call", ["status", "health", "deep_health"])
async def test_the_facade_calls_on_an_adopted_server_end_within_one_deadline(call: str) -> None:
    config = InferConfig.adopted(
        InferFlavor.LLAMACPP, probe_timeout_s=TIMEOUT_S, deep_timeout_s=TIMEOUT_S
    )
    async with hostile_server(LLAMA) as server, open_runtime(config, node_id="n1") as runtime:
        spec = InferenceSpec(
            role="chat", runtime=InferFlavor.LLAMACPP, serve=ServeArgs(port=server.port)
        )
        handle = await runtime.load(spec)
        if call == "deep_health":
            started = trio.current_time()
            with pytest.raises(DeepHealthTimeout, match="no complete answer within 1 s"):
                await runtime.deep_health(handle)
            took = trio.current_time() - started
        elif call == "status":  # a plain function: it answers at once, never waits
            started = trio.current_time()
            runtime.status(handle)
            took = trio.current_time() - started
        else:
            _, took = await timed(lambda: getattr(runtime, call)(handle))
        await runtime.unload(handle)
    assert took < LATE_S
