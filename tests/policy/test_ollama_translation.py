"""Ollama's native API translated to and from the OpenAI-compatible API, without I/O:
requests (`ollama_requests`), whole answers and streams (`ollama_replies`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor
from inferactors._policy import ollama_requests as req
from inferactors._policy.ollama_replies import (
    StreamTranslation,
    Timing,
    chat_reply,
    done_reason,
    embed_reply,
    load_reply,
    ollama_time,
)

LLAMA, MLX = InferFlavor.LLAMACPP, InferFlavor.MLX_LM
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="  # noqa: E501


def test_chat_maps_messages_options_and_streams_by_default() -> None:
    document = {
        "model": "chat:latest",
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"num_predict": 5, "temperature": 0.2, "repeat_penalty": 1.1, "stop": ["x"]},
        "format": "json",
    }
    body = req.chat_body(document, "", LLAMA)
    assert "model" not in body  # llama-server and mlx_lm.server get none
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5
    assert body["temperature"] == 0.2
    assert body["repeat_penalty"] == 1.1
    assert body["stop"] == ["x"]
    assert body["response_format"] == {"type": "json_object"}
    mlx = req.chat_body({**document, "stream": False}, "/m", MLX)
    assert mlx["model"] == "/m"
    assert mlx["stream"] is False
    assert "stream_options" not in mlx
    assert mlx["repetition_penalty"] == 1.1
    assert "repeat_penalty" not in mlx


def test_negative_num_predict_means_no_limit_and_load_options_are_ignored() -> None:
    body = req.chat_body({"messages": [], "options": {"num_predict": -1, "num_ctx": 8}}, "", LLAMA)
    assert "max_tokens" not in body
    assert "num_ctx" not in body


def test_a_schema_format_becomes_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = req.chat_body({"messages": [], "format": schema}, "", LLAMA)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "format", "schema": schema},
    }


def test_images_become_data_url_parts_and_tool_calls_get_openai_shape() -> None:
    messages = [
        {"role": "user", "content": "what is this", "images": [PNG]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "42", "tool_name": "f"},
    ]
    body = req.chat_body({"messages": messages}, "", LLAMA)
    user, assistant, tool = body["messages"]
    assert user["content"][0] == {"type": "text", "text": "what is this"}
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    call = assistant["tool_calls"][0]
    assert call["type"] == "function"
    assert json.loads(call["function"]["arguments"]) == {"x": 1}
    assert tool == {"role": "tool", "content": "42", "name": "f"}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"messages": "hi"}, "$.messages"),
        ({"messages": [{"role": "user", "content": 3}]}, "$.messages[0].content"),
        ({"messages": [], "options": {"temperature": "hot"}}, "$.options.temperature"),
        ({"messages": [], "options": {"top_k": True}}, "$.options.top_k"),
        ({"messages": [], "stream": "yes"}, "$.stream"),
        ({"messages": [], "format": 3}, "$.format"),
        (
            {"messages": [{"role": "user", "content": "", "images": ["bm90IGFuIGltYWdl"]}]},
            "images[0]",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_by_name(document: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidConfig) as raised:
        req.chat_body(document, "", LLAMA)
    assert field in str(raised.value)


def test_generate_goes_through_the_chat_template_unless_raw() -> None:
    path, body = req.generate_body({"prompt": "the cat", "system": "be brief"}, "", LLAMA)
    assert path == req.CHAT_PATH
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "the cat"},
    ]
    path, body = req.generate_body({"prompt": "the cat", "raw": True}, "", LLAMA)
    assert path == req.COMPLETIONS_PATH
    assert body["prompt"] == "the cat"


@pytest.mark.parametrize("key", ["suffix", "template", "context"])
def test_generate_refuses_what_cannot_be_handed_on(key: str) -> None:
    value: object = [1, 2] if key == "context" else "x"
    with pytest.raises(InvalidConfig, match=rf"^\$\.{key}: "):
        req.generate_body({"prompt": "p", key: value}, "", LLAMA)


def test_embed_takes_a_string_or_a_list() -> None:
    assert req.embed_body({"input": "a"}, "") == {"input": "a"}
    assert req.embed_body({"input": ["a", "b"]}, "m") == {"input": ["a", "b"], "model": "m"}
    with pytest.raises(InvalidConfig, match=r"\$\.input\[1\]"):
        req.embed_body({"input": ["a", 2]}, "")


def test_load_requests_are_those_without_prompt_or_messages() -> None:
    assert req.is_load_request({"model": "m"})
    assert req.is_load_request({"model": "m", "messages": []})
    assert not req.is_load_request({"model": "m", "prompt": "x"})


# ---- answers ---------------------------------------------------------------------------------

LLAMA_TIMINGS = {"prompt_n": 3, "prompt_ms": 12.5, "predicted_n": 2, "predicted_ms": 40.0}


def test_a_whole_chat_answer_in_ollama_shape_with_server_timings() -> None:
    document = {
        "choices": [
            {"message": {"role": "assistant", "content": "hello"}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "timings": LLAMA_TIMINGS,
    }
    timing = Timing(load_s=0.5, total_s=1.25, upstream_s=0.7)
    reply = chat_reply(document, kind="chat", model="chat", created_at="T", timing=timing)
    assert reply == {
        "model": "chat",
        "created_at": "T",
        "message": {"role": "assistant", "content": "hello"},
        "done": True,
        "done_reason": "length",
        "total_duration": 1_250_000_000,
        "load_duration": 500_000_000,
        "prompt_eval_count": 3,
        "prompt_eval_duration": 12_500_000,
        "eval_count": 2,
        "eval_duration": 40_000_000,
    }


def test_without_server_timings_the_measured_time_is_used() -> None:
    document = {"choices": [{"text": "x", "finish_reason": "stop"}]}
    timing = Timing(total_s=2.0, upstream_s=1.5)
    reply = chat_reply(document, kind="generate", model="m", created_at="T", timing=timing)
    assert reply["response"] == "x"
    assert reply["done_reason"] == "stop"
    assert reply["prompt_eval_duration"] == 0
    assert reply["eval_duration"] == 1_500_000_000
    assert "eval_count" not in reply
    assert "prompt_eval_count" not in reply


def test_tool_calls_come_back_with_object_arguments() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    document = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    reply = chat_reply(document, kind="chat", model="m", created_at="T", timing=Timing())
    assert reply["message"]["tool_calls"] == [{"function": {"name": "f", "arguments": {"x": 1}}}]
    assert reply["done_reason"] == "stop"


def test_done_reason_and_load_reply() -> None:
    assert [done_reason(r) for r in ("stop", "length", "tool_calls", None)] == [
        "stop", "length", "stop", "stop"
    ]  # fmt: skip
    assert load_reply(model="m", created_at="T", kind="generate") == {
        "model": "m", "created_at": "T", "response": "", "done": True, "done_reason": "load"
    }  # fmt: skip


def test_embeddings_in_index_order() -> None:
    document = {
        "data": [{"index": 1, "embedding": [0.2]}, {"index": 0, "embedding": [0.1]}],
        "usage": {"prompt_tokens": 4},
    }
    reply = embed_reply(document, model="e", timing=Timing(load_s=0.001, total_s=0.002))
    assert reply == {
        "model": "e",
        "embeddings": [[0.1], [0.2]],
        "total_duration": 2_000_000,
        "load_duration": 1_000_000,
        "prompt_eval_count": 4,
    }


def test_created_at_is_rfc3339_utc() -> None:
    assert ollama_time(0.5) == "1970-01-01T00:00:00.500000Z"


def _chunk(content: str | None, finish: str | None = None, **extra: object) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def test_a_stream_becomes_lines_and_one_done_line_after_the_finish() -> None:
    stream = StreamTranslation("chat", "chat")
    assert stream.feed(_chunk(None), "T0") == []  # the opening chunk says nothing
    assert stream.feed(_chunk("he"), "T1") == [
        {
            "model": "chat",
            "created_at": "T1",
            "message": {"role": "assistant", "content": "he"},
            "done": False,
        }
    ]
    assert stream.last_line("T", Timing()) is None  # no finish yet: a cut stream
    stream.feed(_chunk("llo"), "T2")
    stream.feed(_chunk(None, "length", timings=LLAMA_TIMINGS), "T3")
    stream.feed({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}, "T4")
    last = stream.last_line("T5", Timing(total_s=1.0, upstream_s=0.5, first_token_s=0.1))
    assert last is not None
    assert last["done"] is True
    assert last["done_reason"] == "length"
    assert last["message"] == {"role": "assistant", "content": ""}
    assert last["eval_count"] == 2
    assert last["prompt_eval_duration"] == 12_500_000


def test_a_stream_without_server_timings_splits_at_the_first_token() -> None:
    stream = StreamTranslation("generate", "m")
    assert (
        stream.feed({"choices": [{"text": "a", "finish_reason": None}]}, "T")[0]["response"] == "a"
    )
    stream.feed({"choices": [{"text": "", "finish_reason": "stop"}]}, "T")
    last = stream.last_line("T", Timing(total_s=1.0, upstream_s=0.5, first_token_s=0.2))
    assert last is not None
    assert last["prompt_eval_duration"] == 200_000_000
    assert last["eval_duration"] == 300_000_000


def test_an_error_event_ends_the_stream_without_a_done_line() -> None:
    stream = StreamTranslation("chat", "m")
    stream.feed(_chunk(None, "stop"), "T")
    assert stream.feed({"error": {"message": "slot died", "code": 500}}, "T") == []
    assert stream.error == "slot died"
    assert stream.last_line("T", Timing()) is None


def test_streamed_tool_calls_are_put_together() -> None:
    stream = StreamTranslation("chat", "m")
    pieces = [
        {"index": 0, "function": {"name": "f", "arguments": '{"x"'}},
        {"index": 0, "function": {"arguments": ": 1}"}},
    ]
    for piece in pieces:
        stream.feed({"choices": [{"delta": {"tool_calls": [piece]}, "finish_reason": None}]}, "T")
    stream.feed(_chunk(None, "tool_calls"), "T")
    last = stream.last_line("T", Timing())
    assert last is not None
    assert last["message"]["tool_calls"] == [{"function": {"name": "f", "arguments": {"x": 1}}}]
