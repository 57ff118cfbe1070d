"""A crash inside one adopted instance stays inside it (issue 8, item 1; OTP's one_for_one).

The adopted servers are ``edges.hostile_server_support``'s loopback servers (trio and
h11). A bug injected through the edges, a parser that raises and nesting bombs on
``/health``, ``/v1/models`` and a completion each crash (or degrade) that instance alone:
the event names the real exception, an adopted server is never signalled, its watching is
restarted under the default restart policy (2 s, then Running again, counted), a sibling
keeps Running untouched and the facade keeps answering. A bomb either crashes the instance
(RecursionError) or, with the probe's JSON depth limit, is a bad reply; both pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from actors.crash_support import BugSwitch, Recorder, bombing, json_reply, llama_replies
from edges.hostile_server_support import HostileServer, Reply, hostile_server
from inferactors import (
    BackendError,
    Event,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceCrashed,
    InstanceHandle,
    InstanceState,
    RestartScheduled,
    ServeArgs,
    StateChanged,
    open_runtime,
)
from inferactors._actors.instance.probing import ADMISSION_REUSE_S
from inferactors._edges import probe as probe_module
from inferactors._edges.probe import ProberFactory
from inferactors._policy.probe_parse import ListRead, read_model_list

WAIT_S = 30.0


def spec(port: int, role: str = "chat") -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


@asynccontextmanager
async def two_servers(
    target_replies: dict[str, Reply], open_prober: ProberFactory | None = None
) -> AsyncIterator[tuple[InferRuntime, Recorder, HostileServer, InstanceHandle, InstanceHandle]]:
    """A runtime adopting a target and a sibling server; the sibling is Running."""
    async with (
        hostile_server(target_replies) as target_server,
        hostile_server(llama_replies("tiny")) as sibling_server,
    ):
        config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=5.0)
        async with open_runtime(config, open_prober=open_prober) as runtime:
            recorder = Recorder(await runtime.subscribe(4096))
            target = await runtime.load(spec(target_server.port))
            sibling = await runtime.load(spec(sibling_server.port, role="embed"))
            await runtime.start(sibling)
            with trio.fail_after(WAIT_S):
                await runtime.wait_state(sibling, InstanceState.RUNNING)
            yield runtime, recorder, target_server, target, sibling


async def assert_untouched(
    runtime: InferRuntime, recorder: Recorder, sibling: InstanceHandle
) -> None:
    """The sibling is Running, changed state only on its way up, and never crashed."""
    status = runtime.status(sibling)
    assert status.state is InstanceState.RUNNING, status
    events = recorder.of(sibling.instance_id)
    assert not [e for e in events if isinstance(e, InstanceCrashed | RestartScheduled)], events
    downs = [e for e in events if isinstance(e, StateChanged) and e.old is InstanceState.RUNNING]
    assert downs == [], f"the sibling left Running: {downs}"


async def test_a_worker_bug_crashes_only_its_adopted_instance_which_is_watched_again() -> None:
    bugs = BugSwitch()
    async with two_servers(llama_replies("tiny"), bugs.factory()) as (
        runtime,
        recorder,
        server,
        target,
        sibling,
    ):
        await runtime.start(target)
        with trio.fail_after(WAIT_S):
            await runtime.wait_state(target, InstanceState.RUNNING)
        bugs.arm(server.port, lambda: RecursionError("maximum recursion depth exceeded"))
        crash = await recorder.crash_of(target.instance_id)
        assert (crash.error_type, crash.where) == ("RecursionError", "worker monitor")
        assert crash.message == "maximum recursion depth exceeded"
        scheduled = await recorder.until(lambda e: isinstance(e, RestartScheduled))
        assert isinstance(scheduled, RestartScheduled)
        assert (scheduled.instance_id, scheduled.attempt) == (target.instance_id, 1)
        asked = len(server.requests)
        await recorder.until(_running_again(target.instance_id, crash.at))
        status = runtime.status(target)
        assert (status.state, status.restarts) == (InstanceState.RUNNING, 1)
        assert len(server.requests) > asked, "the adopted server is not watched again"
        await assert_untouched(runtime, recorder, sibling)
        assert set(await runtime.instances()) == {target, sibling}


def _running_again(iid: str, after: float) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        return (
            isinstance(event, StateChanged)
            and event.instance_id == iid
            and event.new is InstanceState.RUNNING
            and event.at > after
        )

    return match


async def test_a_caller_of_a_crashed_adopted_worker_is_answered_with_the_crash() -> None:
    bugs = BugSwitch()
    async with two_servers(llama_replies("tiny"), bugs.factory()) as (
        runtime,
        recorder,
        server,
        target,
        sibling,
    ):
        bugs.arm(server.port, lambda: ValueError("x" * 1000))
        with pytest.raises(BackendError) as answered:
            await runtime.health(target)
        assert "crashed in worker health (ValueError: xxx" in str(answered.value)
        crash = await recorder.crash_of(target.instance_id)
        assert len(crash.message) == 200
        assert crash.message.endswith("...")
        report = await runtime.health(target)  # the next call works: the instance was reset
        assert report.models == ("tiny",)
        await assert_untouched(runtime, recorder, sibling)


async def test_a_parser_that_raises_crashes_only_the_instance_it_parses_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parse_or_raise(path: str, status: int, body: bytes) -> ListRead:
        if b"poison" in body:
            raise TypeError("the parser met poison")
        return read_model_list(path, status, body)

    monkeypatch.setattr(probe_module, "read_model_list", parse_or_raise)
    async with two_servers(llama_replies("tiny")) as (runtime, recorder, server, target, sibling):
        server.replies["/v1/models"] = json_reply(b'{"data": [{"id": "poison"}]}')  # after load
        await trio.sleep(ADMISSION_REUSE_S + 0.1)  # the start probes (no fresh admission)
        with pytest.raises(BackendError, match=r"TypeError: the parser met poison"):
            await runtime.start(target)
        crash = await recorder.crash_of(target.instance_id)
        assert (crash.error_type, crash.where) == ("TypeError", "worker confirm_adopted")
        status = runtime.status(target)  # the view says so
        assert status.state is InstanceState.DEGRADED
        assert status.detail == "crashed (TypeError: the parser met poison)"
        with pytest.raises(BackendError, match=r"TypeError: the parser met poison"):
            await runtime.health(target)  # probes again: crashes again, answered
        await assert_untouched(runtime, recorder, sibling)


@pytest.mark.parametrize("path", ["/health", "/v1/models"])
async def test_a_nesting_bomb_in_a_probe_reply_never_ends_the_runtime(path: str) -> None:
    async with two_servers(llama_replies("tiny")) as (runtime, recorder, server, target, sibling):
        server.replies = bombing("tiny", path)  # after load, whose planning probes in the caller
        started: BackendError | None = None
        try:
            await runtime.start(target)  # the confirming probe reads the bomb
        except BackendError as crashed:
            started = crashed
        assert started is None or "RecursionError" in str(started)
        with trio.fail_after(WAIT_S):  # and so does the monitor (or the crash says so)
            while (runtime.status(target)).state is InstanceState.RUNNING:  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert f"GET {path}" in server.requests
        _only_recursion_errors(recorder, target)
        await assert_untouched(runtime, recorder, sibling)
        assert set(await runtime.instances()) == {target, sibling}


async def test_a_nesting_bomb_in_a_completion_never_ends_the_runtime() -> None:
    bombed = bombing("tiny", "/v1/chat/completions")
    async with two_servers(bombed) as (runtime, recorder, server, target, sibling):
        await runtime.start(target)
        with pytest.raises(BackendError):
            await runtime.deep_health(target)
        assert "POST /v1/chat/completions" in server.requests
        assert (runtime.status(target)).state is not InstanceState.UNKNOWN
        _only_recursion_errors(recorder, target)
        await assert_untouched(runtime, recorder, sibling)
        assert await runtime.deep_health(sibling)


def _only_recursion_errors(recorder: Recorder, target: InstanceHandle) -> None:
    crashes = [e for e in recorder.of(target.instance_id) if isinstance(e, InstanceCrashed)]
    assert all(crash.error_type == "RecursionError" for crash in crashes), crashes
