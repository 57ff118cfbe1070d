"""Commands on an adopted llama.cpp instance: deep health, served model, re-adoption, answers.

Checklist item 62 (deep health posts one token, a non-200 is a backend error, a loading
server gets no completion, a hanging one is a deep health timeout at the deadline) and
items 71 and 72 (the served model is the spec's, adopt re-registers a handle, console is
unsupported). Then commands that must always be answered: in flight when the instance is
unloaded, abandoned by their caller, after the runtime closed, and event streams that end
with the runtime. Tests named after a bug guard its fix.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from actors.adopted_support import PORT, FakeLlama, adopted, chat
from inferactors import (
    AdmissionRefused,
    BackendError,
    DeepHealthTimeout,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InvalidConfig,
    Unsupported,
)

# Deep health (item 62).


async def test_deep_health_posts_one_token_and_a_non_200_is_a_backend_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        result = await runtime.deep_health(handle)
        assert (result.text, result.finish_reason) == (" and", "length")
        posts = [r for r in server.requests if r.method == "POST"]
        assert [r.url.path for r in posts] == ["/v1/chat/completions"]
        body = json.loads(posts[0].content)
        assert body["max_tokens"] == 1
        assert body["stream"] is False
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        server.completion = 500
        with pytest.raises(BackendError, match="HTTP 500") as failed:
            await runtime.deep_health(handle)
        assert not isinstance(failed.value, DeepHealthTimeout)


async def test_deep_health_of_a_loading_server_sends_no_completion(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(health=503)
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises(BackendError, match="not up"):
            await runtime.deep_health(handle)
    assert server.methods == {"GET"}


async def test_a_hanging_completion_is_a_deep_health_timeout_after_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama(hang="/v1/chat/completions")
    async with adopted(server, deep_timeout_s=42.0) as runtime:
        handle = await runtime.load(chat())
        started = trio.current_time()
        with pytest.raises(DeepHealthTimeout, match="42 s"):
            await runtime.deep_health(handle)
        assert trio.current_time() - started == pytest.approx(42.0, abs=0.5)


# Served model, re-adoption, console (items 71, 72).


async def test_served_model_is_the_spec_model_when_adopted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        named = await runtime.load(chat())
        unnamed = await runtime.load(chat(role="bare", model=None))
        assert await runtime.served_model(named) == "tiny"
        assert await runtime.served_model(unnamed) is None
        assert await runtime.spec_of(named) == chat()
        assert await runtime.endpoint(named) == f"http://127.0.0.1:{PORT}"


async def test_adopt_re_registers_a_handle_and_console_is_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        again = await runtime.adopt(handle, chat())  # already registered: nothing changes
        assert again.instance_id == handle.instance_id
        await runtime.unload(handle)
        assert (runtime.status(handle)).state is InstanceState.UNKNOWN
        back = await runtime.adopt(handle, chat())
        assert back == handle
        assert (runtime.status(handle)).state is InstanceState.RUNNING
        with pytest.raises(Unsupported, match=f"has no console run \\({handle.instance_id}\\)"):
            await runtime.console(handle)
        server.down = True
        await runtime.unload(handle)
        with pytest.raises(AdmissionRefused, match=r"no infer\.llamacpp server answering"):
            await runtime.adopt(handle, chat())


# Commands that must always be answered.


@pytest.mark.parametrize(
    ("command", "path"),
    [("health", "/health"), ("deep_health", "/v1/chat/completions")],
)
async def test_a_command_in_flight_when_its_instance_is_unloaded_is_answered(
    autojump_clock: trio.testing.MockClock, command: str, path: str
) -> None:
    server = FakeLlama()
    outcome: list[object] = []

    async def ask(runtime: InferRuntime, handle: InstanceHandle) -> None:
        with trio.fail_after(60):
            try:
                outcome.append(await getattr(runtime, command)(handle))
            except BackendError as error:  # "stopped before it answered" would do
                outcome.append(error)

    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        server.hang = path
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, runtime, handle)
            await server.entered.wait()
            await runtime.unload(handle)
    assert len(outcome) == 1


@pytest.mark.parametrize(
    ("command", "path"),
    [("health", "/health"), ("deep_health", "/v1/chat/completions")],
)
async def test_a_caller_that_gives_up_does_not_break_the_runtime(
    autojump_clock: trio.testing.MockClock, command: str, path: str
) -> None:
    server = FakeLlama(slow=path, slow_s=1.5)
    async with adopted(server, probe_timeout_s=3.0) as runtime:
        handle = await runtime.load(chat())
        with trio.move_on_after(0.5) as gave_up:
            await getattr(runtime, command)(handle)
        assert gave_up.cancelled_caught
        await trio.sleep(5.0)  # the answer comes back to nobody meanwhile
        server.slow = None
        assert (runtime.status(handle)).state is InstanceState.RUNNING


async def test_status_answers_at_once_while_the_server_hangs_a_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`status` reads the published view: it never waits for the server nor for an actor
    whose probe hangs (under MockClock, any wait would move the clock)."""
    server = FakeLlama()
    async with adopted(server) as runtime:
        handle = await runtime.load(chat())
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        server.hang = "/health"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.health, handle)
            await server.entered.wait()  # a probe of ours hangs in the server now
            before = trio.current_time()
            status = runtime.status(handle)  # a plain function: it cannot wait
            assert trio.current_time() == before
            assert status.state is InstanceState.RUNNING
            nursery.cancel_scope.cancel()


async def test_status_after_the_runtime_closed_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        handle = await runtime.load(chat())
    status = runtime.status(handle)  # a plain function: it cannot wait
    assert status.state is InstanceState.UNKNOWN


async def test_an_event_stream_ends_when_the_runtime_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat())
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        await runtime.unload(handle)
    with trio.fail_after(60):
        seen = [event async for event in events]
    assert seen, "the events sent before the end are still delivered"


async def test_a_bad_subscribe_argument_fails_only_that_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with adopted(FakeLlama()) as runtime:
        handle = await runtime.load(chat())
        with pytest.raises((InvalidConfig, ValueError)):
            await runtime.subscribe(-1)
        assert (runtime.status(handle)).state is InstanceState.RUNNING
