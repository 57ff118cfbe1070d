"""Tests of the probe's 1 MiB body cap: a streamed body stops being read just past the cap,
a declared length over it fails before reading, exactly 1 MiB is accepted, and an oversized
health body makes the server unhealthy rather than unreachable; on both wires (`Fake`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from edges.probe_support import Fake, reply
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeFailure
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_report import Unhealthy

pytestmark = pytest.mark.usefixtures("wire")


def counted_chunks(pulled: list[int], count: int, size: int) -> AsyncIterator[bytes]:
    """A streamed body of ``count`` chunks of ``size`` bytes; ``pulled[0]`` counts reads."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(count):
            pulled[0] += 1
            yield b"x" * size

    return chunks()


# Cutting a stream short leaves httpx's nested generators (and this fake's) for trio to close,
# which it does with a ResourceWarning (encode/httpx#3686); the cap itself is what we test.
@pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning")
async def test_streamed_body_over_1_mib_stops_early() -> None:
    pulled = [0]
    chunk = 64 * 1024  # 16 chunks are exactly 1 MiB; the stream offers 64 (4 MiB)

    async def big(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=counted_chunks(pulled, 64, chunk))

    async with Fake({"/big": big}).client() as probe:
        with pytest.raises(ProbeFailure, match=r"^GET /big: response too large \(over 1 MiB\)$"):
            await probe.get("/big")
    assert pulled[0] == 17


async def test_declared_length_over_1_mib_fails_before_reading() -> None:
    pulled = [0]

    async def big(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Length": str(MAX_BODY_BYTES + 1)}
        return httpx.Response(200, headers=headers, content=counted_chunks(pulled, 1, 1))

    async with Fake({"/big": big}).client() as probe:
        with pytest.raises(ProbeFailure, match="response too large") as caught:
            await probe.get("/big")
    assert caught.value.kind == "too-large"
    assert pulled[0] == 0


async def test_body_of_exactly_1_mib_is_accepted() -> None:
    pulled = [0]

    async def streamed(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=counted_chunks(pulled, 16, 64 * 1024))

    fake = Fake({"/fixed": reply(200, b"y" * MAX_BODY_BYTES), "/streamed": streamed})
    async with fake.client() as probe:
        assert await probe.get("/fixed") == (200, b"y" * MAX_BODY_BYTES)
        status, body = await probe.get("/streamed")
    assert (status, len(body)) == (200, MAX_BODY_BYTES)


async def test_oversized_health_body_is_unhealthy_not_unreachable() -> None:
    fake = Fake({"/health": reply(200, b"z" * (MAX_BODY_BYTES + 1))})
    async with fake.client() as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    assert report.health == Unhealthy("GET /health: response too large (over 1 MiB)")
