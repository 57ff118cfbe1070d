"""The faults a retrying client meets on a completion, pure: an error status for completions
N..M, a connection reset at completion K, a body or a stream cut after N bytes.

Completions are numbered from 1 in the order the fake serves them (health probes, model
lists and refused bodies are not counted), the number `FakeState.next_completion` gives.
`retry_outcome` says whether completion ``number`` meets an error status or a reset (before
anything is generated); `cut_after` how many bytes of its answer are sent before the
connection is closed. The program acts on them in ``_fake_server``. Like the fake server
program, this module imports nothing of the ``inferactors`` package.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._fake_faults import FakeServerFaults


def error_document(status: int) -> dict[str, object]:
    """llama-server's error body for ``status``: ``{"error": {"code", "message", "type"}}``
    (the message is the status's reason phrase; the type as llama-server names its 503, 500
    and 400, ``rate_limit_error`` for 429)."""
    kinds = {400: "invalid_request_error", 429: "rate_limit_error", 503: "unavailable_error"}
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"error": {"code": status, "message": phrase, "type": kinds.get(status, "server_error")}}


def fails_with(faults: FakeServerFaults, number: int) -> int | None:
    """The status completion ``number`` is answered with (``fail_status`` within
    ``fail_from``..``fail_to``), or None."""
    if faults.fail_status is None or number < faults.fail_from:
        return None
    if faults.fail_to is not None and number > faults.fail_to:
        return None
    return faults.fail_status


def resets(faults: FakeServerFaults, number: int) -> bool:
    """Whether completion ``number`` is answered with a TCP reset (``reset_at``)."""
    return faults.reset_at == number


def cut_after(faults: FakeServerFaults, number: int, *, stream: bool) -> int | None:
    """How many bytes of completion ``number``'s body are sent before the connection is
    closed (``cut_body_after`` for a plain answer, ``cut_stream_after`` for server-sent
    events, on completion ``cut_at`` only), or None: all of it."""
    if number != faults.cut_at:
        return None
    return faults.cut_stream_after if stream else faults.cut_body_after
