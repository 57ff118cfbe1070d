"""Whether a stream ended as a whole answer, from its last bytes (`stream_end`), and the
error shapes of each dialect (`dialects`)."""

from __future__ import annotations

import json

import pytest

from inferactors._policy.dialects import Dialect, error_document, error_frame, error_type
from inferactors._policy.stream_end import StreamEnd, ended_whole, last_sse_data

OPENAI_TAIL = b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
CUT_OPENAI = b'data: {"choices":[{"delta":{"content":" and"},"finish_reason":null}]}\n\n'


@pytest.mark.parametrize(
    ("kind", "tail", "whole"),
    [
        (StreamEnd.OPENAI_DONE, OPENAI_TAIL, True),
        (StreamEnd.OPENAI_DONE, OPENAI_TAIL.replace(b"\n", b"\r\n"), True),
        (StreamEnd.OPENAI_DONE, CUT_OPENAI, False),
        (StreamEnd.OPENAI_DONE, b"", False),
        (StreamEnd.OPENAI_DONE, b'data: {"error": {"message": "x"}}\n\n', True),
        (StreamEnd.OPENAI_DONE, b"data: [DO", False),
        (StreamEnd.LLAMA_STOP, b'data: {"content": "", "stop": true}\n\n', True),
        (StreamEnd.LLAMA_STOP, b'data: {"content": " a", "stop": false}\n\n', False),
        (StreamEnd.OLLAMA_DONE, b'{"done":false}\n{"done":true,"done_reason":"stop"}\n', True),
        (StreamEnd.OLLAMA_DONE, b'{"done":false}\n', False),
        (StreamEnd.OLLAMA_DONE, b'{"error":"boom"}\n', True),
        (StreamEnd.ANY, b"", True),
    ],
)
def test_ended_whole(kind: StreamEnd, tail: bytes, whole: bool) -> None:
    assert ended_whole(kind, tail) is whole


def test_last_sse_data_joins_multiline_data() -> None:
    assert last_sse_data(b"event: x\ndata: a\ndata: b\n\n: comment\n\n") == "a\nb"


def test_errors_in_each_dialect() -> None:
    assert error_document(Dialect.OLLAMA, 404, "model 'x' not found") == {
        "error": "model 'x' not found"
    }
    assert error_document(Dialect.OPENAI, 400, "$.model: bad", param="model") == {
        "error": {
            "code": 400,
            "message": "$.model: bad",
            "type": "invalid_request_error",
            "param": "model",
        }
    }
    assert error_type(503) == "unavailable_error"
    assert error_type(418) == "invalid_request_error"
    frame = error_frame(Dialect.OPENAI, "cut")
    assert frame.startswith(b"data: ")
    assert frame.endswith(b"\n\n")
    assert json.loads(frame[6:])["error"]["message"] == "cut"
    assert json.loads(error_frame(Dialect.OLLAMA, "cut")) == {"error": "cut"}
