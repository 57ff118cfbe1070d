"""How the monitor posts what it found to its actor: at once while the inbox has room,
waiting (never dropping a report) while it is full, and nothing once the actor is gone.
MockClock; a scripted prober (``actors.monitor_support``)."""

from __future__ import annotations

import trio
import trio.testing

from actors.monitor_support import Script, probing
from inferactors._actors.instance.messages import Probed


async def test_a_full_inbox_holds_the_monitor_back_and_loses_no_report(
    autojump_clock: trio.testing.MockClock,
) -> None:
    send, receive = trio.open_memory_channel[object](1)
    script = Script()
    got: list[Probed] = []
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        nursery.start_soon(probing(script, 8100, send).monitor, None, scope)
        await trio.sleep(10.5)  # ten probes made; the inbox holds one: the monitor waits
        probes_while_full = len(script.calls)
        async for message in receive:  # the actor catches up
            assert isinstance(message, Probed)
            got.append(message)
            if len(got) == 5:
                break
        scope.cancel()
    assert probes_while_full == 2  # the first posted, the second waits for room
    assert len(got) == 5  # nothing dropped


async def test_an_actor_that_is_gone_is_posted_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    send, receive = trio.open_memory_channel[object](4)
    receive.close()  # the actor ended
    script = Script()
    with trio.move_on_after(5.5):
        await probing(script, 8101, send).monitor(None, trio.CancelScope())
    assert len(script.calls) >= 5  # it went on probing until cancelled, posting into nothing
