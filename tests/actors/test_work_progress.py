"""Long waits before a server serves say how far they got, as `WorkProgress` events the
library emits (the CLI prints them; embedders and the page can show them): a re-hash at
spawn every second with bytes, rate and time left (a 6 GiB model gave 13 s of silence), and
a model load every 5 s until the server serves. Timing under MockClock(autojump_threshold=0).
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from actors.managed_support import ClockEvents, fake_fleet_config
from inferactors import (
    Event,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    RestartPolicy,
    ServeArgs,
    WorkProgress,
    open_runtime,
)
from inferactors._actors.instance.progress import HashWatch, report_hashing, report_loading
from inferactors._cli.event_words import describe_event
from inferactors.testing import FakeFleet

GIB = 1 << 30


async def test_a_rehash_is_reported_each_second_it_moves_not_per_chunk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch, seen = HashWatch(), list[Event]()
    model = Path("/models/big.gguf")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(report_hashing, watch, seen.append, "chat")
        for tick in range(1, 61):  # a 4 MiB chunk every 0.1 s: 40 MiB/s, 6 GiB in ~150 s
            watch(model, tick * (4 << 20), 6 * GIB)
            await trio.sleep(0.1)
        await trio.sleep(2.5)  # nothing moves: nothing more is said
        watch(model, 6 * GIB, 6 * GIB)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert all(isinstance(event, WorkProgress) for event in seen)
    progress = [event for event in seen if isinstance(event, WorkProgress)]
    assert len(progress) == 6  # 5 while moving (the first sample starts the clock), the end
    first = progress[0]
    assert (first.instance_id, first.work, first.subject) == ("chat", "re-hashing", "big.gguf")
    assert first.total == 6 * GIB
    assert 35 <= first.rate / (1 << 20) <= 45  # samples fall between chunks
    assert first.eta_s is not None
    assert 130 < first.eta_s < 180
    assert [round(event.at) for event in progress] == [2, 3, 4, 5, 6, 9]
    assert progress[-1].done == 6 * GIB
    assert describe_event(progress[-1]) == (
        "chat  re-hashing big.gguf: 100% 6.0 GiB of 6.0 GiB, done in 8 s"
    )
    assert describe_event(first) == (
        f"chat  re-hashing big.gguf:   1% 80.0 MiB of 6.0 GiB, {first.rate / (1 << 20):.1f} MiB/s, "
        f"{first.eta_s:.0f} s left"
    )


async def test_a_load_is_reported_every_five_seconds_from_the_spawn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = list[Event]()
    with trio.move_on_after(17.0):
        await report_loading(seen.append, "chat", "tiny", trio.current_time() - 1.0)
    assert [(e.work, round(e.elapsed_s)) for e in seen if isinstance(e, WorkProgress)] == [
        ("loading", 5),
        ("loading", 10),
        ("loading", 15),
    ]
    assert describe_event(seen[0]) == "chat  loading tiny: 5 s since the spawn, not serving yet"


async def test_a_slow_model_load_shows_progress_until_the_server_serves(
    tmp_path: Path, tiny_gguf: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = fake_fleet_config(tmp_path, tiny_gguf, RestartPolicy(max_restarts=0))
    fleet = FakeFleet(load_s=12.0)  # "Loading model" (503) for 12 s, then ready
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=18650)
    )
    async with open_runtime(config, node_id="clock", edges=fleet.edges()) as runtime:
        events = await runtime.subscribe(buffer=1000)
        h = ClockEvents(runtime, fleet, events, trio.current_time())
        handle = await runtime.load(spec)
        await runtime.start(handle)
        with trio.fail_after(100):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        await trio.sleep(30.0)  # serving: no more load reports
        while True:
            try:
                h.seen.append(events.receive_nowait())
            except trio.WouldBlock:
                break
    loads = [e for e in h.seen if isinstance(e, WorkProgress)]
    assert [(e.work, e.subject, round(e.elapsed_s)) for e in loads] == [
        ("loading", "tiny", 5),
        ("loading", "tiny", 10),
    ]
    assert loads[0].instance_id == handle.instance_id
