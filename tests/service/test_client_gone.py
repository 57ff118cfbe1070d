"""`cancelled_when_gone`: the block of an answer is cancelled when its client disconnects
(ASGI ``http.disconnect``), and says so; a block that ends first leaves the watcher
stopped. The answers built on it are tested end to end (the front door's grant and relay
in test_front_door_faults.py, the page's stream in test_ui_stream*.py)."""

from __future__ import annotations

import trio
import trio.testing

from inferactors._service.client_gone import cancelled_when_gone


def _receiver() -> tuple[trio.MemorySendChannel[dict[str, str]], object]:
    sender, receiver = trio.open_memory_channel[dict[str, str]](10)
    return sender, receiver.receive


async def test_a_disconnect_cancels_the_block_and_is_told() -> None:
    sender, receive = _receiver()
    reached_the_end = False
    await sender.send({"type": "http.request"})  # a late message, not a disconnect
    async with cancelled_when_gone(receive) as client:  # type: ignore[arg-type]
        await sender.send({"type": "http.disconnect"})
        await trio.sleep_forever()
        reached_the_end = True
    assert client.gone
    assert not reached_the_end


async def test_a_block_that_ends_first_stops_the_watcher() -> None:
    sender, receive = _receiver()
    async with cancelled_when_gone(receive) as client:  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
    assert not client.gone
    await sender.send({"type": "http.disconnect"})
    await trio.testing.wait_all_tasks_blocked()
    assert sender.statistics().current_buffer_used == 1  # nobody reads it any more
