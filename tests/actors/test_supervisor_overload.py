"""The supervisor's own overload, reported as its state, never as a server's
(``_policy/lateness.py``): a really blocked loop (a synchronous sleep, nothing mocked) is
one `SupervisorOverloaded` event, the runtime's `supervisor_status` says so while it lasts,
and one `SupervisorCaughtUp` follows a calm period; the adopted server it probes stays
Running, however many of its probes in a row our loop made late. Admission's probe that
our stall made late is made again, not read as a refusal.

Real time, a real loopback server (``edges.hostile_server_support``), adopted mode.
"""

from __future__ import annotations

import functools
import time

import trio

from edges.hostile_server_support import Reply, hostile_server
from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ServeArgs,
    StateChanged,
    SupervisorCaughtUp,
    SupervisorOverloaded,
    SupervisorStatus,
    open_runtime,
)
from inferactors._actors.instance.probing import ADMISSION_REUSE_S
from inferactors._edges.loop_lag import loop_lag
from inferactors._policy.lateness import LATE_S

MODELS = b'{"object": "list", "data": [{"id": "tiny"}]}'
BLOCK_S = 0.3 + LATE_S + 0.4


async def _starve(seconds: float, *, after_s: float = 0.0) -> None:
    await trio.sleep(after_s)
    time.sleep(seconds)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


def _spec(port: int) -> InferenceSpec:
    return InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


async def test_a_stalled_loop_is_one_overload_of_the_supervisor_then_one_catching_up() -> None:
    replies = {"/health": Reply(body=b"{}"), "/v1/models": Reply(body=MODELS)}
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=0.3)
    async with hostile_server(replies) as server, open_runtime(config) as runtime:
        handle = await runtime.load(_spec(server.port))
        await runtime.start(handle)
        with trio.fail_after(10):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        loop_lag().watch.calm_s = 1.0
        events = await runtime.subscribe()
        with events:
            await _starve(BLOCK_S)
            with trio.fail_after(10):
                overloaded = await events.receive()
            assert isinstance(overloaded, SupervisorOverloaded), overloaded
            status = await runtime.supervisor_status()
            assert status == SupervisorStatus(True, overloaded.since, overloaded.why)
            await _starve(BLOCK_S)  # still overloaded: not reported again
            seen = []
            with trio.fail_after(10):
                async for event in events:
                    seen.append(event)
                    if isinstance(event, SupervisorCaughtUp):
                        break
        assert not any(isinstance(event, SupervisorOverloaded) for event in seen)
        assert seen[-1].worst_stall_s >= BLOCK_S - 0.05  # type: ignore[union-attr]
        assert await runtime.supervisor_status() == SupervisorStatus()
        changes = [e for e in seen if isinstance(e, StateChanged)]
        assert changes == [], changes  # the server was never judged on our lateness
        assert (runtime.status(handle)).state is InstanceState.RUNNING


async def _starve_most_of_each_second(seconds: float) -> None:
    """Block the loop 0.8 s of every second, for ``seconds``."""
    end = trio.current_time() + seconds
    while trio.current_time() < end:
        await trio.sleep(0.2)
        time.sleep(0.8)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


async def test_a_loop_late_for_many_probes_in_a_row_never_judges_the_server() -> None:
    """Before, the fourth late probe in a row was judged as the timeout it seemed: a
    healthy server read Exited (or Degraded) while only the supervisor was overloaded.
    Each probe takes 0.4 s (its reply trickles), longer than the loop's 0.2 s between
    blocks, so each is in flight when a block eats its deadline. After 3 probe timeouts
    without a verdict the probes are stretched (``_policy/lateness.py`` `VerdictBound`),
    and the healthy server's reply comes within the stretched deadline: a verdict, Up."""
    slow_health = Reply(body=b'{"status": "ok"}', chunk=4, pause_s=0.1)
    replies = {"/health": slow_health, "/v1/models": Reply(body=MODELS)}
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=0.6)
    async with hostile_server(replies) as server, open_runtime(config) as runtime:
        handle = await runtime.load(_spec(server.port))
        await runtime.start(handle)
        with trio.fail_after(10):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        events = await runtime.subscribe()
        lost_before = loop_lag().watch.no_verdicts_total
        with events:
            await _starve_most_of_each_second(11.0)  # a late probe every 2 s
            await trio.sleep(0.1)
            seen = []
            while True:
                try:
                    seen.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
        lost = loop_lag().watch.no_verdicts_total - lost_before
        assert lost >= 3, lost  # as many late probes as the old rule let pass in a row
        changes = [e for e in seen if isinstance(e, StateChanged)]
        assert all(e.new is InstanceState.RUNNING for e in changes), changes  # never judged
        said = {e.detail or "" for e in changes}  # at most: how long no probe judged
        assert all(d == "server up" or d.startswith("no verdict for over ") for d in said)
        assert (runtime.status(handle)).state is InstanceState.RUNNING


async def test_an_admission_probe_made_late_by_a_stall_is_made_again() -> None:
    slow_health = Reply(body=b'{"status": "ok"}', chunk=4, pause_s=0.05)  # in flight
    replies = {"/health": slow_health, "/v1/models": Reply(body=MODELS)}
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=0.5)
    async with (
        hostile_server(replies) as server,
        open_runtime(config) as runtime,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(functools.partial(_starve, 0.5 + LATE_S + 0.3, after_s=0.03))
        handle = await runtime.load(_spec(server.port))  # not refused
        assert handle.instance_id
    assert server.requests.count("GET /health") >= 2  # the late one, then a verdict


async def test_an_adopted_start_whose_check_a_stall_made_late_checks_again() -> None:
    """The start's check of an adopted server (its admission's report too old to stand)
    is made again while our stall leaves it without a verdict (before, it was refused as
    "adopted server is not answering")."""
    slow_health = Reply(body=b'{"status": "ok"}', chunk=4, pause_s=0.05)  # in flight
    replies = {"/health": slow_health, "/v1/models": Reply(body=MODELS)}
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=0.5)
    async with hostile_server(replies) as server, open_runtime(config) as runtime:
        handle = await runtime.load(_spec(server.port))
        await trio.sleep(ADMISSION_REUSE_S + 0.2)
        before = server.requests.count("GET /health")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(_starve, 0.5 + LATE_S + 0.3, after_s=0.03))
            await runtime.start(handle)  # not refused
        assert server.requests.count("GET /health") - before >= 2  # the late one, again


async def test_two_runtimes_on_one_loop_report_its_stall_alike_dated_from_the_stall() -> None:
    """The overload is the loop's: two runtimes of one trio run each tell their own
    subscribers of the same one, with the same ``since`` (design/probing.md says why),
    and it dates from the stall's start, so ``lasted_s`` counts the stall (before: from
    its end, and a 20 s stall then 5 s calm read ``lasted_s`` 5 s)."""
    config = InferConfig.adopted(InferFlavor.LLAMACPP)
    async with open_runtime(config) as first, open_runtime(config) as second:
        loop_lag().watch.calm_s = 1.0
        streams = [await first.subscribe(), await second.subscribe()]
        began = trio.current_time()
        await _starve(BLOCK_S)
        said: list[tuple[SupervisorOverloaded, SupervisorCaughtUp]] = []
        for events in streams:
            with events, trio.fail_after(10):
                overloaded = caught_up = None
                async for event in events:
                    if isinstance(event, SupervisorOverloaded) and overloaded is None:
                        overloaded = event
                    if isinstance(event, SupervisorCaughtUp) and overloaded is not None:
                        caught_up = event
                        break
                assert overloaded is not None
                assert caught_up is not None
                said.append((overloaded, caught_up))
    (one, one_done), (two, two_done) = said
    assert (one.since, one.why) == (two.since, two.why)
    assert one_done.lasted_s == two_done.lasted_s
    assert one.since <= began + 0.1  # when the loop stopped, not when it ran again
    assert one_done.lasted_s >= BLOCK_S + 1.0 - 0.05  # the stall, then the calm
