"""Replies built to exhaust us, from a real loopback server (`edges.hostile_server_support`):
compression bombs in every encoding httpx can decode here (gzip, deflate, br, zstd, each
64 MiB of zeros) are refused unread, with the memory Python holds during the call measured
by tracemalloc; the probe asks for identity encoding; a reply nested 100,000 deep or with a
5,000-digit integer is a bad reply, never a RecursionError or ValueError.

A control test fetches the same bomb with plain httpx to show that the measurement does see
a bomb being inflated (so the refusals above could fail).
"""

from __future__ import annotations

import httpx
import pytest

from edges.hostile_server_support import (
    BOMB_MIB,
    MiB,
    Reply,
    bomb,
    hostile_server,
    nesting_bomb,
    peak_allocated,
)
from inferactors._edges.ollama_client import OllamaClient
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeClient, ProbeFailure
from inferactors._errors import BackendError
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_report import Unhealthy, Up

ENCODINGS = ["gzip", "deflate", "br", "zstd"]

# A reply refused mid-stream leaves httpx's stream generators for trio to close, which it
# does with a ResourceWarning (encode/httpx#3686); what we test is that nothing was inflated.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)


def encoded(encoding: str) -> Reply:
    return Reply(headers=(("Content-Encoding", encoding),), body=bomb(encoding))


async def refusal(probe: ProbeClient, path: str) -> ProbeFailure:
    try:
        await probe.get(path)
    except ProbeFailure as failure:
        return failure
    raise AssertionError(f"GET {path} was accepted")


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_compression_bomb_is_refused_unread(encoding: str) -> None:
    async with (
        hostile_server({"/v1/models": encoded(encoding)}) as server,
        ProbeClient.open(server.base_url, timeout_s=10.0) as probe,
    ):
        failure, peak = await peak_allocated(lambda: refusal(probe, "/v1/models"))
    assert failure.kind == "encoded"
    assert failure.why == (
        f"GET /v1/models: reply is {encoding}-encoded; we asked for identity (refused unread)"
    )
    assert peak < MAX_BODY_BYTES, f"{peak / MiB:.1f} MiB held while refusing a bomb"
    assert server.seen[0]["accept-encoding"] == "identity"


async def test_the_measurement_sees_a_bomb_inflate_when_httpx_decodes_it() -> None:
    """Control: plain httpx (Accept-Encoding gzip, deflate, br, zstd) inflates one chunk of
    the same bomb to tens of MiB; `peak_allocated` reports it."""

    async def first_decoded_chunk(client: httpx.AsyncClient) -> int:
        async with client.stream("GET", "/v1/models") as response:
            async for chunk in response.aiter_bytes():
                return len(chunk)
        return 0

    async with (
        hostile_server({"/v1/models": encoded("gzip")}) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        size, peak = await peak_allocated(lambda: first_decoded_chunk(client))
    assert size > 8 * MiB
    assert peak > 8 * MiB


@pytest.mark.parametrize("encoding", ["gzip", "br"])
async def test_a_bomb_on_health_makes_the_server_unhealthy_not_the_prober_crash(
    encoding: str,
) -> None:
    async with (
        hostile_server({"/health": encoded(encoding)}) as server,
        ProbeClient.open(server.base_url, timeout_s=10.0) as probe,
    ):
        report, peak = await peak_allocated(lambda: probe.report(InferFlavor.LLAMACPP))
    assert report.health == Unhealthy(
        f"GET /health: reply is {encoding}-encoded; we asked for identity (refused unread)"
    )
    assert peak < MAX_BODY_BYTES


async def test_the_ollama_client_refuses_a_bomb_too() -> None:
    async with hostile_server({"/api/ps": encoded("zstd")}) as server:
        client = OllamaClient.open(server.base_url, timeout_s=10.0)
        async with client:
            with pytest.raises(ProbeFailure, match="zstd-encoded") as caught:
                await client.ps()
    assert caught.value.kind == "encoded"
    assert {seen["accept-encoding"] for seen in server.seen} == {"identity"}


async def test_identity_as_content_encoding_is_read_as_usual() -> None:
    body = b'{"data": [{"id": "tiny.gguf"}]}'
    reply = Reply(headers=(("Content-Encoding", "identity"),), body=body)
    async with (
        hostile_server({"/health": Reply(body=b"{}"), "/v1/models": reply}) as server,
        ProbeClient.open(server.base_url, timeout_s=10.0) as probe,
    ):
        report = await probe.report(InferFlavor.LLAMACPP)
    assert (report.health, report.models) == (Up(), ("tiny.gguf",))


# Nesting bombs and huge integers (the JSON half of item 2).


async def test_a_nesting_bomb_model_list_leaves_the_server_up_with_no_models() -> None:
    replies = {"/health": Reply(body=b"{}"), "/v1/models": Reply(body=nesting_bomb(300_000))}
    async with (
        hostile_server(replies) as server,
        ProbeClient.open(server.base_url, timeout_s=10.0) as probe,
    ):
        report = await probe.report(InferFlavor.LLAMACPP)
    assert (report.health, report.models) == (Up(), ())


async def test_a_nesting_bomb_completion_is_a_bad_reply() -> None:
    replies = {"/v1/chat/completions": Reply(body=nesting_bomb())}
    async with (
        hostile_server(replies) as server,
        ProbeClient.open(server.base_url, timeout_s=10.0) as probe,
    ):
        with pytest.raises(BackendError) as caught:
            await probe.tiny_completion(None)
    assert str(caught.value) == (
        "deep health: completion body is not a JSON object: "
        "JSON nested deeper than 64 levels at line 1, column 65"
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (nesting_bomb(), "JSON nested deeper than 64 levels at line 1, column 65"),
        (
            b'{"models": [{"name": "tiny", "size": ' + b"7" * 5000 + b"}]}",
            "$.models[0].size: an integer of 5000 digits (at most 100)",
        ),
        (b'{"models": [], "models": []}', '$: the object has the key "models" twice'),
    ],
)
async def test_a_hostile_ollama_list_is_a_bad_reply_naming_where(body: bytes, why: str) -> None:
    async with (
        hostile_server({"/api/ps": Reply(body=body)}) as server,
        OllamaClient.open(server.base_url, timeout_s=10.0) as client,
    ):
        with pytest.raises(BackendError) as caught:
            await client.ps()
    assert str(caught.value) == f"ollama GET /api/ps: reply is not JSON: {why}"
    assert not isinstance(caught.value, ProbeFailure)


def test_the_bombs_are_what_they_claim() -> None:
    """Each bomb is small on the wire: the ratio is what makes it a bomb."""
    for encoding in ENCODINGS:
        assert len(bomb(encoding)) < BOMB_MIB * MiB // 200, encoding
