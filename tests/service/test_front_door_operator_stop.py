"""An operator's stop that outlasts its drain ends the streams still in flight with an
error in each client's dialect that says the instance was stopped by an operator (our
words for why), never with a made-up end, and never with only what the broken connection
looked like: a real `Fleet` over a fake llama-server whose streams never end, its front
door on loopback, and the real ``openai`` and ``ollama`` clients streaming through it."""

from __future__ import annotations

from collections.abc import Callable

import ollama
import openai
import trio

from inferactors._service.fleet_open import open_fleet
from inferactors.testing import EndlessStream, RuntimeKit, Timeline
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile

ON_DEMAND = "residency = { on_demand = true }\n"
DRAIN_S = 0.5
Said = tuple[int, Exception]
"""How many chunks a client read, and what it raised."""
STOPPED = "the instance was stopped by an operator before this answer ended (drain timed out)"


def _openai_stream(url: str, flowing: trio.Event) -> Said:
    said = 0
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        try:
            with stream:
                for _ in stream:
                    said += 1
                    if said == 1:
                        trio.from_thread.run_sync(flowing.set)
        except Exception as error:  # the test says which kind it must be
            return said, error
    raise AssertionError("the stream ended without an error")


def _ollama_stream(url: str, flowing: trio.Event) -> Said:
    said = 0
    with ollama.Client(host=url) as client:
        try:
            for part in client.chat(model="chat", messages=[{"role": "user", "content": "hi"}],
                                    stream=True):  # fmt: skip
                assert not part.done, "a stopped stream must never say done"
                said += 1
                if said == 1:
                    trio.from_thread.run_sync(flowing.set)
        except Exception as error:  # the test says which kind it must be
            return said, error
    raise AssertionError("the stream ended without an error")


async def test_a_stop_past_the_drain_ends_open_streams_with_the_stops_words(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit, Timeline.of(EndlessStream(every_s=0.05)))
    port = free_port()
    run.write(Entry("chat", free_port(), extra=ON_DEMAND))
    door = f"\n[residency]\nmax_wait_s = 30.0\ndrain_timeout_s = {DRAIN_S}\n"
    run.path.write_text(run.path.read_text() + door + f"\n[front_door]\nport = {port}\n")
    url = f"http://127.0.0.1:{port}"
    results: dict[str, Said] = {}
    async with open_fleet(run.config(), run.path) as fleet:

        async def stream(
            name: str, play: Callable[[str, trio.Event], Said], flowing: trio.Event
        ) -> None:
            results[name] = await trio.to_thread.run_sync(play, url, flowing)

        flows = {"openai": trio.Event(), "ollama": trio.Event()}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, "openai", _openai_stream, flows["openai"])
            nursery.start_soon(stream, "ollama", _ollama_stream, flows["ollama"])
            with trio.fail_after(60.0):
                for flowing in flows.values():
                    await flowing.wait()  # both streams are passing tokens on
                await fleet.stop("chat")  # drains DRAIN_S, then stops the server under them
        assert fleet.view("chat").status.stop_reason == "requested"
    said, error = results["openai"]
    assert said >= 1
    assert isinstance(error, openai.APIError), repr(error)
    assert error.message == f"model 'chat': {STOPPED}"
    said, error = results["ollama"]
    assert said >= 1
    assert isinstance(error, ollama.ResponseError), repr(error)
    assert error.error == f"model 'chat': {STOPPED}"
