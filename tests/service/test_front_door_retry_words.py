"""A refusal that no retry can help is not retried by the real ``openai`` client: it sees
``x-should-retry: false`` before its own rule, which retries every 5xx (a model that can
never fit the memory budget is a 507); a refusal a retry can help says when
(``Retry-After``) and that it may be retried."""

from __future__ import annotations

from functools import partial

import httpx
import openai
import pytest
import trio

from inferactors._actors.front_door_seam import Grant, ModelEntry, Residency
from inferactors._config.front_door import FrontDoorConfig
from inferactors._errors import FrontDoorRefused, RefusalKind
from inferactors._flavor import InferFlavor
from inferactors._service.front_door_server import open_front_door


class _Refusing:
    """A scheduler that refuses every request with ``refusal`` and counts them."""

    def __init__(self, refusal: FrontDoorRefused) -> None:
        self.refusal = refusal
        self.asked = 0

    def models(self) -> tuple[ModelEntry, ...]:
        return (ModelEntry("big", (), InferFlavor.LLAMACPP, Residency.NOT_LOADED, True),)

    async def acquire(self, model: str) -> Grant:
        self.asked += 1
        raise self.refusal


def _chat(url: str) -> None:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=2) as client:
        client.chat.completions.create(model="big", messages=[{"role": "user", "content": "hi"}])


async def test_never_fits_is_sent_once_by_the_openai_client() -> None:
    never = FrontDoorRefused(
        "model 'big' needs 9.0 GiB; the budget is 4.0 GiB",
        kind=RefusalKind.NEVER_FITS,
        status=507,
        model="big",
    )
    scheduler = _Refusing(never)
    async with open_front_door(scheduler, FrontDoorConfig(port=0)) as door:
        with pytest.raises(openai.APIStatusError) as refused:
            await trio.to_thread.run_sync(partial(_chat, door.url))
        async with httpx.AsyncClient() as client:
            raw = await client.post(door.url + "/v1/completions", json={"model": "big"})
    assert refused.value.status_code == 507
    assert "needs 9.0 GiB" in refused.value.message
    assert scheduler.asked == 2  # one by the openai client (no retry), one by httpx
    assert raw.headers["x-should-retry"] == "false"
    assert "retry-after" not in raw.headers


async def test_queue_full_says_when_to_retry() -> None:
    full = FrontDoorRefused(
        "the queue is full", kind=RefusalKind.QUEUE_FULL, status=503, model="big", retry_after_s=2.5
    )
    opened = open_front_door(_Refusing(full), FrontDoorConfig(port=0))
    async with opened as door, httpx.AsyncClient() as client:
        raw = await client.post(door.url + "/api/generate", json={"model": "big"})
    assert raw.status_code == 503
    assert (raw.headers["retry-after"], raw.headers["x-should-retry"]) == ("3", "true")
    assert raw.json() == {"error": "the queue is full"}
