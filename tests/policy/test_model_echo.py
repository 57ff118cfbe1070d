"""An OpenAI answer's ``model`` names what the client asked for, however its stream was
cut into chunks, and nothing else in it changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inferactors._policy.model_echo import ModelEcho, echo_model

EVENT = (
    b'data: {"model":"/srv/m/tiny.gguf",'
    b'"choices":[{"delta":{"content":"\\"model\\":\\"x\\""}}]}\n\n'
)


def test_a_whole_answer_names_the_model_asked_for() -> None:
    body = b'{"id":"c1","model" : "/srv/m/tiny.gguf","usage":{}}'
    assert echo_model(body, "chat") == b'{"id":"c1","model":"chat","usage":{}}'
    assert echo_model(b'{"id":"c1"}', "chat") == b'{"id":"c1"}'


def test_a_model_key_inside_generated_text_is_left_alone() -> None:
    out = echo_model(EVENT, "chat")
    assert out.startswith(b'data: {"model":"chat","choices"')
    assert b'\\"model\\":\\"x\\"' in out


@given(st.lists(st.integers(min_value=1, max_value=len(EVENT) * 3), max_size=8))
def test_a_stream_cut_anywhere_is_rewritten_whole(cuts: list[int]) -> None:
    stream = EVENT * 3 + b"data: [DONE]"
    echo, out, at = ModelEcho("chat"), b"", 0
    for cut in sorted(cuts):
        out += echo.feed(stream[at:cut])
        at = max(at, cut)
    out += echo.feed(stream[at:]) + echo.rest()
    assert out == echo_model(stream, "chat")
    assert out.count(b'"model":"chat"') == 3
    assert out.endswith(b"data: [DONE]")
