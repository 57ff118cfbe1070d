"""A stream, cut into chunks anywhere, is passed on in whole frames only: server-sent events
at their blank line (``\\n\\n``, ``\\r\\n\\r\\n``, ``\\r\\r``), NDJSON documents at their line's
end; what is held is exactly the start of the next frame, and a model echo over whole
frames is the echo of the whole stream."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._policy.model_echo import echo_model
from inferactors._policy.stream_frames import NDJSON_ENDS, SSE_ENDS, StreamFrames

EVENT = (
    b'data: {"model":"/srv/m/tiny.gguf",'
    b'"choices":[{"delta":{"content":"\\"model\\":\\"x\\""}}]}\n\n'
)
SSE = EVENT * 3 + b"data: [DONE]\n\n"
LINE = b'{"model":"tiny","response":" a","done":false}\n'


def _fed(frames: StreamFrames, stream: bytes, cuts: list[int]) -> list[bytes]:
    """What ``frames`` passes on for each chunk of ``stream`` cut at ``cuts``."""
    out, at = [], 0
    for cut in [*sorted(cuts), len(stream)]:
        out.append(frames.feed(stream[at : max(at, cut)]))
        at = max(at, cut)
    return out


@pytest.mark.parametrize(
    ("ends", "stream", "blank"),
    [
        (SSE_ENDS, SSE, b"\n\n"),
        (SSE_ENDS, SSE.replace(b"\n", b"\r\n"), b"\r\n\r\n"),
        (SSE_ENDS, SSE.replace(b"\n", b"\r"), b"\r\r"),
        (NDJSON_ENDS, LINE * 4, b"\n"),
    ],
)
@given(
    broke_at=st.integers(min_value=0, max_value=len(SSE) * 2),
    cuts=st.lists(st.integers(min_value=0, max_value=len(SSE) * 2), max_size=8),
)
def test_a_stream_cut_anywhere_passes_on_whole_frames_and_holds_the_rest(
    ends: tuple[bytes, ...], stream: bytes, blank: bytes, broke_at: int, cuts: list[int]
) -> None:
    got = stream[:broke_at]  # the stream broke here (or ended: past its length)
    frames = StreamFrames(ends)
    passed = b"".join(_fed(frames, got, [c for c in cuts if c < len(got)]))
    whole = got.rfind(blank) + len(blank) if blank in got else 0
    assert passed == got[:whole]
    assert (frames.held, frames.rest()) == (len(got) - whole, got[whole:])


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SSE)), max_size=8))
def test_the_model_echo_of_whole_frames_is_the_echo_of_the_stream(cuts: list[int]) -> None:
    frames = StreamFrames(SSE_ENDS)
    out = b"".join(echo_model(whole, "chat") for whole in _fed(frames, SSE, cuts))
    assert out == echo_model(SSE, "chat")
    assert out.count(b'"model":"chat"') == 3


def test_nothing_is_held_once_a_frame_ends_and_the_held_size_is_counted() -> None:
    frames = StreamFrames(SSE_ENDS)
    assert frames.feed(b"data: {") == b""
    assert frames.held == 7
    assert frames.feed(b'"a":1}\n') == b""  # a line, not yet an event
    assert frames.feed(b"\ndata: ") == b'data: {"a":1}\n\n'
    assert (frames.held, frames.rest(), frames.held) == (6, b"data: ", 0)
