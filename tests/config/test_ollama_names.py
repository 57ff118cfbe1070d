"""Ollama model names, read as Ollama reads them (issue 9 item 6; Ollama's
``types/model/name.go`` ``ParseName``): defaults filled in, case-blind, its grammar kept,
and an Ollama instance's ``model`` may be any such name (a llama.cpp one stays a token)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors import InferenceSpec, InferFlavor, InvalidConfig
from inferactors._config.ollama_names import (
    OllamaName,
    ollama_name_problem,
    parse_ollama_name,
    same_ollama_name,
)

QWEN = OllamaName("registry.ollama.ai", "library", "qwen2.5", "latest")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("qwen2.5", QWEN),
        ("qwen2.5:latest", QWEN),
        ("library/qwen2.5:latest", QWEN),
        ("registry.ollama.ai/library/qwen2.5:latest", QWEN),
        ("https://registry.ollama.ai/library/qwen2.5", QWEN),
        ("qwen2.5:0.5b", OllamaName("registry.ollama.ai", "library", "qwen2.5", "0.5b")),
        ("user/model", OllamaName("registry.ollama.ai", "user", "model", "latest")),
        ("hf.co/org/repo:Q4_K_M", OllamaName("hf.co", "org", "repo", "Q4_K_M")),
        ("localhost:5000/team/m:v1", OllamaName("localhost:5000", "team", "m", "v1")),
        (
            "gpt-oss:120b-cloud",
            OllamaName("registry.ollama.ai", "library", "gpt-oss", "120b-cloud"),
        ),
    ],
)
def test_real_name_forms_parse_with_ollamas_defaults(text: str, parsed: OllamaName) -> None:
    assert parse_ollama_name(text) == parsed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("a b", "whitespace"),
        ("qwen\t", "whitespace"),
        ("../etc/passwd", '".."'),
        ("a..b", '".."'),
        ("a/b/c/d", "more than host/namespace/model"),
        ("m:", "tag is empty"),
        (":7b", "model is empty"),
        ("/m", "namespace is empty"),
        ("ns.x/m", "namespace"),  # Ollama allows no dot in a namespace
        ("-m", "model"),  # a part starts with a letter, digit or _
        ("m:7b+Q4", "tag"),
        ("ftp://h/n/m", "more than host/namespace/model"),
        ("m" * 81, "longer than 80"),
        ("a" * 601, "longer than 600"),
    ],
)
def test_malformed_names_are_refused_in_words(text: str, why: str) -> None:
    problem = ollama_name_problem(text)
    assert problem is not None
    assert why in problem
    with pytest.raises(InvalidConfig, match=r"^model .* is not an Ollama model name"):
        parse_ollama_name(text)


@given(
    st.sampled_from(["qwen2.5", "user/m", "hf.co/org/repo:Q4_K_M"]),
    st.lists(st.booleans(), min_size=21, max_size=21),
)
def test_names_compare_case_blind_as_ollama_does(name: str, upper: list[bool]) -> None:
    mixed = "".join(c.upper() if up else c for c, up in zip(name, upper, strict=False))
    assert same_ollama_name(name, mixed)


def test_distinct_models_stay_distinct() -> None:
    assert not same_ollama_name("qwen", "qwen2.5:0.5b")
    assert not same_ollama_name("user/model", "model")
    assert not same_ollama_name("other.host/library/m", "m")
    assert not same_ollama_name("a b", "a  b")  # unreadable: plain equality only


def _spec(runtime: InferFlavor, model: str) -> InferenceSpec:
    return InferenceSpec(role="chat", runtime=runtime, model=model)


@pytest.mark.parametrize("model", ["user/model", "hf.co/org/repo:Q4_K_M", "qwen2.5:0.5b"])
def test_an_ollama_spec_names_any_ollama_model(model: str) -> None:
    _spec(InferFlavor.OLLAMA, model).validate()


@pytest.mark.parametrize("model", ["user/../m", "user/", "a/b/c/d", "a b"])
def test_an_ollama_spec_refuses_a_malformed_name_naming_model(model: str) -> None:
    with pytest.raises(InvalidConfig, match=r"^model .* is not an Ollama model name"):
        _spec(InferFlavor.OLLAMA, model).validate()


@pytest.mark.parametrize("runtime", [InferFlavor.LLAMACPP, InferFlavor.MLX_LM])
def test_other_flavors_keep_registry_tokens(runtime: InferFlavor) -> None:
    with pytest.raises(InvalidConfig, match="model must be a plain token"):
        _spec(runtime, "user/model").validate()
