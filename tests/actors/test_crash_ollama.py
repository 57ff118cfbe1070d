"""A crash inside a managed Ollama instance stays inside it (issue 8, item 1).

The Ollama actor under its real supervisor, the fake Ollama behind a socketless transport,
trio's MockClock(autojump_threshold=0). The transport raises a plain ValueError once, on a
chosen path (a bug met while reading a reply): the instance crashes alone and stops as on
a stop, by its own rules: the one unload we owe for a model we loaded is sent, once (a load
still in flight is aborted and owes none, issue 9 item 7); a model someone else loaded is
left alone; nothing is restarted; a new start loads again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import httpx
import pytest
import trio
import trio.testing

from actors.ollama_support import (
    TAG,
    Line,
    Rig,
    loads,
    rig,
    slow,
    unloads,
)
from inferactors import BackendError, InstanceCrashed, InstanceState, RestartScheduled
from inferactors.testing._fake_ollama import FakeOllama
from inferactors.testing._fake_ollama_api import FakeOllamaConfig


@attrs.define
class BuggyLine(Line):
    """`Line` whose next request to ``bug_path`` raises ValueError (then it is cleared)."""

    bug_path: str | None = None

    def transport(self) -> httpx.MockTransport:
        inner = super().transport()

        async def handle(request: httpx.Request) -> httpx.Response:
            if request.url.path == self.bug_path:
                self.bug_path = None
                raise ValueError(f"a bug reading {request.url.path}")
            return await inner.handle_async_request(request)

        return httpx.MockTransport(handle)


@asynccontextmanager
async def buggy_rig(fake: FakeOllama) -> AsyncIterator[tuple[Rig, BuggyLine]]:
    """`actors.ollama_support.rig` on a `BuggyLine`."""
    line = BuggyLine(fake)
    async with rig(fake, line=line) as buggy:
        yield buggy, line


async def until(rig: Rig, state: InstanceState, detail: str | None = None) -> None:
    """`Rig.until` within 600 virtual seconds."""
    with trio.fail_after(600):
        await rig.until(state, detail)


def crashes(rig: Rig) -> list[InstanceCrashed]:
    rig.changes()  # reads what is queued
    return [event for event in rig.seen if isinstance(event, InstanceCrashed)]


async def test_a_crash_in_the_ownership_watch_unloads_our_model_once(
    fake: FakeOllama, autojump_clock: trio.testing.MockClock
) -> None:
    async with buggy_rig(fake) as (rig, line):
        await rig.start()
        await until(rig, InstanceState.RUNNING)
        line.bug_path = "/api/ps"  # the watch's next look
        await until(rig, InstanceState.LOADED, "crashed (ValueError: a bug reading /api/ps)")
        [crash] = crashes(rig)
        assert (crash.where, crash.message) == ("worker watch", "a bug reading /api/ps")
        status = await rig.status()
        assert status.detail == "crashed (ValueError: a bug reading /api/ps); model unloaded"
        await trio.sleep(60)
        assert len(unloads(fake)) == 1
        assert not [event for event in rig.seen if isinstance(event, RestartScheduled)]
        await rig.start()  # a new start loads again
        await until(rig, InstanceState.RUNNING)
        assert len(loads(fake)) == 2


async def test_a_crash_while_loading_cancels_the_load_which_owes_no_unload(
    fake: FakeOllama, autojump_clock: trio.testing.MockClock
) -> None:
    slow(fake, load_delay_s=60.0)
    async with buggy_rig(fake) as (rig, line):
        await rig.start()
        await until(rig, InstanceState.DEGRADED, "loading model")
        await trio.sleep(1.0)
        line.bug_path = "/api/version"  # the status request's survey
        with pytest.raises(BackendError, match=r"crashed in worker survey_for \(ValueError"):
            await rig.status()
        await until(rig, InstanceState.LOADED, "crashed (ValueError")
        assert len(loads(fake)) == 1
        assert unloads(fake) == []  # the aborted load never brought the model in
        assert fake.resident() == ("other:7b",)


async def test_a_crash_leaves_a_model_someone_else_loaded_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeOllama.create(FakeOllamaConfig(models=("tiny",), preloaded=("tiny",)))
    async with buggy_rig(fake) as (rig, line):
        await rig.start()
        await until(rig, InstanceState.RUNNING)
        line.bug_path = "/api/ps"
        await until(rig, InstanceState.LOADED, "crashed (ValueError")
        status = await rig.status()
        assert status.detail == (
            "crashed (ValueError: a bug reading /api/ps); the model stays resident "
            "(loaded by someone else)"
        )
        assert unloads(fake) == []
        assert TAG in fake.resident()
