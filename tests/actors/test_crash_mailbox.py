""" "Let it crash" at its boundary: the mailbox every actor shares, and the supervisor's net.

`Mailbox` turns an ``Exception`` from its handler or a worker into a `Crash` of its actor:
the callers waiting on the loop or on a `soon` worker get a `BackendError` naming it, `soon`
workers are cancelled, `finish` workers go on (a fallback stands in for the result of one
that raised), and the loop takes the next message. `trio.Cancelled` and other
``BaseException`` s are never caught. A `Crash` names the exception on one line of at most
200 characters. An actor that dies all the same is published as crashed and forgotten by
its supervisor, which goes on. Virtual time: MockClock(autojump_threshold=0).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from types import SimpleNamespace

import attrs
import pytest
import trio
import trio.testing

from actors.adopted_support import errors_in
from inferactors import (
    BackendError,
    ControlMode,
    Event,
    InferenceSpec,
    InferFlavor,
    InstanceCrashed,
    RestartPolicy,
    ServeArgs,
    UnknownInstance,
)
from inferactors._actors.mailbox import CRASH_MESSAGE_CHARS, Crash, Mailbox
from inferactors._actors.messages import ListInstances, Load, Reply, Subscribe, call
from inferactors._actors.supervisor import Supervisor


@attrs.frozen
class Ask:
    """A command with a reply channel, as the loop sees one."""

    reply: trio.MemorySendChannel[Reply[None]]


def reply_pair() -> tuple[
    trio.MemorySendChannel[Reply[None]], trio.MemoryReceiveChannel[Reply[None]]
]:
    return trio.open_memory_channel[Reply[None]](1)


async def error_of(receive: trio.MemoryReceiveChannel[Reply[None]]) -> str:
    reply = await receive.receive()
    assert isinstance(reply.error, BackendError), reply
    return str(reply.error)


@asynccontextmanager
async def running(handle: Callable[[object], None], log: list[object]) -> AsyncIterator[Mailbox]:
    events, _unread = trio.open_memory_channel[Event](16)
    box = Mailbox.create("box", events)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.run, handle, log.append)
        await trio.testing.wait_all_tasks_blocked()
        yield box
        box.close()


async def waits(reply: object) -> None:
    await trio.sleep_forever()


# The Crash record.


def test_a_crash_names_the_exception_on_one_bounded_line() -> None:
    crash = Crash.of(ValueError("first line\nsecond\tline " + "x" * 500), "worker w")
    assert crash.error_type == "ValueError"
    assert "\n" not in crash.message
    assert crash.message.startswith("first line second line xxx")
    assert len(crash.message) == CRASH_MESSAGE_CHARS
    assert crash.describe() == f"ValueError: {crash.message}"
    assert str(crash.error("box")) == f"box crashed in worker w ({crash.describe()})"


def test_a_crash_names_the_first_leaf_of_an_exception_group() -> None:
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [KeyError("k")]), OSError("o")])
    crash = Crash.of(group, "worker w")
    assert (crash.error_type, crash.message) == ("KeyError", "'k' (and 1 more exceptions)")


def test_a_crash_survives_an_exception_that_cannot_be_printed() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert Crash.of(Unprintable(), "w").describe() == "Unprintable: <unprintable>"
    assert Crash.of(RuntimeError(), "w").describe() == "RuntimeError"


# The mailbox.


async def test_a_crashing_worker_answers_every_caller_and_cancels_only_soon_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[object] = []
    finished = trio.Event()

    async def broken(reply: object) -> None:
        await trio.sleep(1.0)
        raise ValueError("bad")

    async def finisher() -> None:
        await trio.sleep(5.0)
        finished.set()

    async with running(log.append, log) as box:
        waiting, waiting_answer = reply_pair()
        failing, failing_answer = reply_pair()
        box.soon(trio.sleep_forever)
        box.soon(waits, waiting)
        box.finish(finisher)
        box.soon(broken, failing)
        crashed = "box crashed in worker broken (ValueError: bad)"
        assert await error_of(failing_answer) == crashed
        assert await error_of(waiting_answer) == crashed
        await finished.wait()  # the finish worker went on
        assert trio.current_time() == pytest.approx(5.0)
        assert log == [Crash("ValueError", "bad", "worker broken")]
        box.inbox.send_nowait("next")
        await trio.testing.wait_all_tasks_blocked()
        assert log[-1] == "next"  # the loop takes the next message


async def test_a_crashing_handler_answers_its_message_and_the_loop_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[object] = []

    def handle(message: object) -> None:
        if isinstance(message, Ask):
            raise KeyError("field")
        log.append(message)

    async with running(handle, log) as box:
        send, receive = reply_pair()
        box.inbox.send_nowait(Ask(send))
        assert (
            await error_of(receive) == "box crashed in its loop, handling Ask (KeyError: 'field')"
        )
        box.inbox.send_nowait("after")
        await trio.testing.wait_all_tasks_blocked()
        assert log == [Crash("KeyError", "'field'", "its loop, handling Ask"), "after"]


async def test_a_crash_is_announced_as_the_actors_event_before_it_is_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, receive = trio.open_memory_channel[Event](16)
    box = Mailbox.create("box", events)
    log: list[object] = []

    def handle(message: object) -> None:
        raise KeyError("field")

    def crashed(crash: Crash) -> None:
        log.append(receive.receive_nowait())  # already announced when the reset runs
        log.append(crash)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.run, handle, crashed)
        box.inbox.send_nowait("boom")
        await trio.testing.wait_all_tasks_blocked()
        where = "its loop, handling str"
        assert log == [
            InstanceCrashed("box", "KeyError", "'field'", where, 0.0),
            Crash("KeyError", "'field'", where),
        ]
        box.close()


async def test_a_finish_worker_that_raises_posts_its_fallback_before_the_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[object] = []

    async def spawn(reply: object) -> None:
        await trio.lowlevel.checkpoint()
        raise OSError("no fork")

    async with running(log.append, log) as box:
        send, receive = reply_pair()
        box.finish(spawn, send, fallback=lambda error: ("spawn failed", str(error)))
        assert await error_of(receive) == "box crashed in worker spawn (OSError: no fork)"
        await trio.testing.wait_all_tasks_blocked()
        said = "box crashed in worker spawn (OSError: no fork)"
        assert log == [("spawn failed", said), Crash("OSError", "no fork", "worker spawn")]


async def test_cancellation_is_never_a_crash(autojump_clock: trio.testing.MockClock) -> None:
    log: list[object] = []
    send, receive = reply_pair()
    with trio.move_on_after(1.0):
        async with running(log.append, log) as box:
            box.soon(waits, send)
            await trio.sleep_forever()
    with pytest.raises(trio.EndOfChannel):
        await receive.receive()  # closed unanswered: its caller learns at once
    assert log == []


@pytest.mark.parametrize("escape", [SystemExit, KeyboardInterrupt])
async def test_a_base_exception_from_a_worker_is_never_caught(
    autojump_clock: trio.testing.MockClock, escape: type[BaseException]
) -> None:
    log: list[object] = []

    async def leaving() -> None:
        await trio.lowlevel.checkpoint()
        raise escape()

    async def serve() -> None:
        async with running(log.append, log) as box:
            box.soon(leaving)
            await trio.sleep_forever()

    with pytest.raises(BaseExceptionGroup) as raised:
        await serve()
    assert [type(error) for error in errors_in(raised.value)] == [escape]
    assert log == []


# The supervisor's net.


SPEC = InferenceSpec(
    role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=18540)
)


@attrs.define(eq=False)
class FakeActor:
    """What the supervisor sees of an actor; ``dies_after_s``: its serve raises then."""

    instance_id: str
    dies_after_s: float | None
    inbox: trio.MemorySendChannel[object]
    plan: SimpleNamespace

    @classmethod
    def make(cls, instance_id: str, dies_after_s: float | None, port: int) -> FakeActor:
        send, _receive = trio.open_memory_channel[object](4)
        spec = attrs.evolve(SPEC, serve=ServeArgs(port=port))
        plan = SimpleNamespace(spec=spec, mode=ControlMode.MANAGED, restart_policy=RestartPolicy())
        return cls(instance_id, dies_after_s, send, plan)

    async def serve(self) -> None:
        if self.dies_after_s is None:
            await trio.sleep_forever()
        await trio.sleep(self.dies_after_s)
        raise ValueError("beyond repair")


async def test_an_actor_that_dies_anyway_is_forgotten_and_the_supervisor_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor.create()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.serve)
        events = await call(supervisor.inbox, partial(Subscribe, 16))
        await call(supervisor.inbox, partial(Load, FakeActor.make("doomed", 1.0, 18540)))
        await call(supervisor.inbox, partial(Load, FakeActor.make("healthy", None, 18541)))
        crash = await events.receive()
        assert crash == InstanceCrashed("doomed", "ValueError", "beyond repair", "the actor", 1.0)
        assert await call(supervisor.inbox, ListInstances) == ("healthy",)
        again = FakeActor.make("doomed", None, 18540)  # its id and port are free again
        await call(supervisor.inbox, partial(Load, again))
        assert await call(supervisor.inbox, ListInstances) == ("healthy", "doomed")
        nursery.cancel_scope.cancel()


def test_unknown_instance_is_what_a_drained_inbox_answers() -> None:
    events, _unread = trio.open_memory_channel[Event](1)
    box = Mailbox.create("box", events)
    send, receive = reply_pair()
    box.inbox.send_nowait(Ask(send))
    box.drain()
    reply = receive.receive_nowait()
    assert isinstance(reply.error, UnknownInstance)
    with pytest.raises(trio.BrokenResourceError):
        box.inbox.send_nowait("later")  # closed: the supervisor refuses at once
