"""An OpenAI answer's ``model`` names what the client asked for, and nothing else in it
changes (a stream, cut anywhere, is rewritten whole: tests/policy/test_stream_frames.py)."""

from __future__ import annotations

from inferactors._policy.model_echo import echo_model

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
