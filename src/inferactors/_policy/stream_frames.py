"""A stream's bytes passed on in whole frames only (pure; no I/O).

A client reads a stream frame by frame: a server-sent event ends at a blank line, an NDJSON
document at its line's end. The ``openai`` client parses each event's ``data`` as JSON once
the blank line comes; the ``ollama`` client parses each line. So a frame that was only half
sent when the server's stream broke can never be made readable: whatever follows it (an
error event) would be read as part of it, and the client fails to parse the mixture instead
of reporting the error. `StreamFrames` therefore passes on each frame once it is whole and
holds the start of the next; when the stream breaks, the held part is dropped, and the
error event that follows starts on a clean frame boundary.

Holding a partial frame costs a client nothing: it could not use it before its end anyway.
The blank lines recognised are the ones the ``openai`` client splits events at (``\\n\\n``,
``\\r\\n\\r\\n``, ``\\r\\r``); an NDJSON line ends at ``\\n``.
"""

from __future__ import annotations

import attrs

SSE_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
"""The blank lines that end a server-sent event."""
NDJSON_ENDS = (b"\n",)
"""The end of an NDJSON line."""
_LONGEST = max(len(end) for end in SSE_ENDS)


@attrs.define
class StreamFrames:
    """A stream's bytes cut after the last whole frame (module docstring).

    Args:
        ends: what ends a frame (`SSE_ENDS` or `NDJSON_ENDS`).
    """

    ends: tuple[bytes, ...]
    _held: bytearray = attrs.field(factory=bytearray)
    _searched: int = 0
    """How much of ``_held`` is known to hold no frame end."""

    @property
    def held(self) -> int:
        """How many bytes of a partial frame are held, bytes."""
        return len(self._held)

    def feed(self, chunk: bytes) -> bytes:
        """The frames ``chunk`` completes, with what was held before them (b"": none yet);
        the start of the next frame is held."""
        self._held += chunk
        end = _last_end(self._held, self.ends, max(0, self._searched - _LONGEST + 1))
        if end == 0:
            self._searched = len(self._held)
            return b""
        whole = bytes(self._held[:end])
        del self._held[:end]
        self._searched = len(self._held)
        return whole

    def rest(self) -> bytes:
        """The held partial frame, forgotten here: the caller passes it on (the stream ended
        cleanly) or drops it (the stream broke)."""
        rest = bytes(self._held)
        self._held.clear()
        self._searched = 0
        return rest


def _last_end(data: bytearray, ends: tuple[bytes, ...], start: int) -> int:
    """Where the last frame of ``data`` that ends at or after ``start`` ends; 0: none."""
    found = (data.rfind(end, start) for end in ends)
    return max((at + len(end) for at, end in zip(found, ends, strict=True) if at >= 0), default=0)
