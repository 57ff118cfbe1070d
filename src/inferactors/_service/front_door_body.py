"""Reading a client's request body at the front door: bounded in size and in time, JSON read
with the project's one safe parser, and the model it names.

A hostile or broken client gets a clear 4xx (`BadRequest`) and costs no other request
anything: the body is read at most `BodyLimits.max_bytes` (a ``Content-Length`` above it is
refused before a byte is read: 413), within `BodyLimits.timeout_s` for the whole body, with no
silence longer than `BodyLimits.idle_timeout_s` (a client that trickles it, slowloris, or
stops sending it, gets 408; hypercorn already closes a connection whose
request head does not arrive within its keep-alive timeout), and parsed by
`inferactors._safe_json.parse_json` (depth, duplicate keys, huge integers: 400 naming line
and column or the path).

Content types: a JSON endpoint takes ``application/json`` (any ``+json`` type, any
parameters), no ``Content-Type`` at all, and ``application/x-www-form-urlencoded``, which
is what ``curl -d`` sends and what Ollama's own examples use; any other type (a form upload,
text) is refused with 415 before the body is read. So is a compressed body (a
``Content-Encoding`` other than ``identity``, such as ``gzip``): 415 naming it, rather than
"not valid JSON" about its compressed bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import attrs
import trio
from starlette.requests import ClientDisconnect, Request

from .._errors import BadRequest, InvalidConfig, shown
from .._safe_json import parse_json

MiB = 1024 * 1024
CURL_FORM = "application/x-www-form-urlencoded"


@attrs.frozen
class BodyLimits:
    """How much of a request body the front door reads, and how long it waits for it.

    Attributes:
        max_bytes: the largest body accepted, bytes.
        timeout_s: how long the whole body may take to arrive, float seconds.
        idle_timeout_s: the longest the body may send nothing (before its first chunk, or
            between two), float seconds.
    """

    max_bytes: int = 32 * MiB
    timeout_s: float = 60.0
    idle_timeout_s: float = 10.0


class ClientGone(Exception):
    """The client closed the connection before its request was read: nothing to answer."""


def json_content_type(request: Request) -> None:
    """Refuse a body type that is not JSON, or a body that comes compressed (module
    docstring).

    Raises:
        BadRequest: 415, naming the type or the ``Content-Encoding``.
    """
    encoding = request.headers.get("content-encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        raise BadRequest(
            f"Content-Encoding {shown(encoding)} is not accepted: the front door reads "
            "request bodies uncompressed (send the JSON as it is, without Content-Encoding)",
            status=415,
        )
    given = request.headers.get("content-type")
    if given is None:
        return
    media = given.split(";", 1)[0].strip().lower()
    if media in ("application/json", CURL_FORM) or media.endswith("+json"):
        return
    raise BadRequest(f"Content-Type {shown(media)} is not JSON: send application/json", status=415)


async def read_body(
    request: Request, limits: BodyLimits, take: Callable[[int], None] | None = None
) -> bytes:
    """The whole body of ``request`` (module docstring); ``take`` is told the size of each
    chunk as it comes (it may refuse it by raising, ``front_door_intake.Holding.take``).

    Raises:
        BadRequest: 413 (too large, by ``Content-Length`` or as read), 408 (not all there
            within the time allowed, or nothing sent for `BodyLimits.idle_timeout_s`), 400
            (a ``Content-Length`` that is not a number).
        ClientGone: the client left before the body was read.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest(f"Content-Length {shown(declared)} is not a number")
        if int(declared) > limits.max_bytes:
            raise _too_large(limits, f"{int(declared)} bytes declared")
    chunks: list[bytes] = []
    size = 0
    with (
        trio.move_on_after(limits.timeout_s) as waited,
        trio.move_on_after(limits.idle_timeout_s) as quiet,
    ):
        try:
            async with contextlib.aclosing(request.stream()) as stream:
                async for chunk in stream:
                    quiet.deadline = trio.current_time() + limits.idle_timeout_s
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise _too_large(limits, f"more than {limits.max_bytes} bytes sent")
                    if take is not None:
                        take(len(chunk))
                    chunks.append(chunk)
        except ClientDisconnect:
            raise ClientGone() from None
    if quiet.cancelled_caught:
        raise BadRequest(
            f"the request body stopped coming: nothing for {limits.idle_timeout_s:g} s "
            f"({size} bytes came)",
            status=408,
        )
    if waited.cancelled_caught:
        raise BadRequest(
            f"the request body did not arrive within {limits.timeout_s:g} s ({size} bytes came)",
            status=408,
        )
    return b"".join(chunks)


def _too_large(limits: BodyLimits, what: str) -> BadRequest:
    return BadRequest(
        f"the request body is too large ({what}; at most {limits.max_bytes} bytes)", status=413
    )


def json_object(body: bytes, *, in_steps: bool = False) -> dict[str, Any]:
    """``body`` read as a JSON object by the safe parser (``in_steps``: as `parse_json`'s,
    for a body parsed in a worker thread).

    Raises:
        BadRequest: 400: empty, not JSON (line and column), too deep, a duplicate key, a
            huge integer, or JSON that is not an object.
    """
    if not body.strip():
        raise BadRequest("the request body is empty: send a JSON object")
    try:
        document = parse_json(body, in_steps=in_steps)
    except InvalidConfig as error:
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise BadRequest(f"$: expected a JSON object, got {type(document).__name__}")
    return document


def model_name(document: dict[str, Any], known: str, *, old_field: str | None = None) -> str:
    """The ``model`` a request names; where Ollama still takes an older field for it
    (``name`` on ``/api/show``), ``old_field`` is read when ``model`` is missing or empty,
    as Ollama does.

    Args:
        document: the request body.
        known: the models there are, for the message (`front_door_names.model_list`).
        old_field: the older field read when ``model`` is missing or empty, if any.

    Raises:
        BadRequest: 400: ``$.model`` missing or empty (and ``old_field`` too), or not a
            string (either field).
    """
    field = "model"
    if old_field is not None and document.get("model") in (None, ""):
        field = old_field
    model = document.get(field)
    if model is None or model == "":
        raise BadRequest(f"$.model: name the model to use (one of {known})")
    if not isinstance(model, str):
        raise BadRequest(f"$.{field}: expected a string, got {shown(model)}")
    return model
