"""Tests of the one safe JSON parser (`inferactors._safe_json`) and of the reply parsers that
use it (``_policy/probe_parse.py``, ``_policy/ollama_parse.py``).

The parser refuses, with `InvalidConfig` naming the line or the JSON path: nesting past 64
levels (found before parsing, so a 100,000-deep bomb costs a scan, not a RecursionError),
a key twice in one object, an integer of more than 100 digits (5,000 digits included, where
Python's own limit raises a bare ValueError), NaN and Infinity, and text that is not UTF-8
or not JSON. Hypothesis checks that ordinary JSON round-trips, that depth is judged exactly
at any nesting, and that no input at all makes the parser or a reply parser raise anything
but our typed errors.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._errors import BackendError, InvalidConfig
from inferactors._policy.ollama_parse import json_object as ollama_object
from inferactors._policy.ollama_parse import parse_ps, parse_tags
from inferactors._policy.probe_parse import (
    classify_health,
    json_object,
    parse_completion,
    parse_model_ids,
    parse_ollama_version,
)
from inferactors._policy.probe_report import Loading
from inferactors._safe_json import MAX_DEPTH, NotJson, check_tree, json_path, parse_json

BOMB = "[" * 100_000 + "]" * 100_000


def refusal(text: str | bytes) -> str:
    with pytest.raises(InvalidConfig) as caught:
        parse_json(text)
    return str(caught.value)


# Depth, judged before parsing.


def nested(depth: int, opener: str = "[") -> str:
    closer = {"[": "]", "{": "}"}
    inner = "1"
    for _ in range(depth):
        inner = f"[{inner}]" if opener == "[" else f'{{"k": {inner}}}'
    assert inner.count(opener) == depth
    assert inner.count(closer[opener]) == depth
    return inner


def test_64_levels_are_read_and_65_are_refused_naming_line_and_column() -> None:
    assert parse_json(nested(MAX_DEPTH)) is not None
    assert refusal(nested(MAX_DEPTH + 1)) == (
        "JSON nested deeper than 64 levels at line 1, column 65"
    )
    assert refusal('{"a":\n' + nested(MAX_DEPTH + 1, "{")).endswith("at line 2, column 379")


def test_a_100k_deep_bomb_is_refused_without_recursion() -> None:
    assert refusal(BOMB) == "JSON nested deeper than 64 levels at line 1, column 65"
    assert refusal('{"a": ' + "{" * 100_000) == (
        "JSON nested deeper than 64 levels at line 1, column 70"
    )


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"x": "[" * 100_000, "y": '\\"[[[', "z": ["{" * 500]})
    assert parse_json(text) == json.loads(text)


@given(st.lists(st.sampled_from(["[", "{"]), min_size=1, max_size=150))
def test_depth_is_judged_exactly_at_any_nesting(openers: list[str]) -> None:
    text = "1"
    for opener in reversed(openers):
        text = f"[{text}]" if opener == "[" else f'{{"k": {text}}}'
    if len(openers) <= MAX_DEPTH:
        assert parse_json(text) == json.loads(text)
    else:
        assert refusal(text).startswith("JSON nested deeper than 64 levels")


# Duplicate keys, huge integers, constants, encodings.


def test_a_key_twice_is_refused_naming_the_object_and_the_key() -> None:
    assert refusal('{"a": 1, "a": 2}') == '$: the object has the key "a" twice'
    text = '{"models": [{"name": "x"}, {"name": "y", "size": 1, "name": "z"}]}'
    assert refusal(text) == '$.models[1]: the object has the key "name" twice'


def test_odd_and_long_keys_are_quoted_on_one_line() -> None:
    assert refusal('{"we\\nird": {"k": 1, "k": 2}}') == (
        '$["we\\nird"]: the object has the key "k" twice'
    )
    long = "k" * 100
    message = refusal(f'{{"{long}": 1, "{long}": 2}}')
    assert message == f'$: the object has the key "{"k" * 40}..." twice'
    assert json_path(["a", 0, "b c", *[0] * 20]) == '$.a[0]["b c"][0][0][0][0][0]...(23 steps)'


def test_integers_over_100_digits_are_refused_naming_the_path() -> None:
    assert parse_json("9" * 100) == int("9" * 100)
    assert parse_json("-" + "9" * 100) == -int("9" * 100)
    assert refusal('{"n": [' + "1" * 101 + "]}") == (
        "$.n[0]: an integer of 101 digits (at most 100)"
    )
    five_thousand = '{"models": [{"size": ' + "7" * 5000 + "}]}"
    assert refusal(five_thousand) == "$.models[0].size: an integer of 5000 digits (at most 100)"
    assert refusal("-" + "1" * 1_000_000).startswith("$: an integer of 1000000 digits")


@pytest.mark.parametrize("name", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_refused(name: str) -> None:
    assert refusal(f'{{"x": [{name}]}}') == f"$.x[0]: {name} is not a JSON number"


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1.5E+400"])
def test_a_number_too_large_for_a_float_is_refused_not_read_as_infinity(number: str) -> None:
    said = refusal(f'{{"max_tokens": {number}}}')
    assert said == f"$.max_tokens: {number} is not a finite JSON number (too large for a float)"
    assert parse_json('{"t": 1e308, "s": 2.5e-400}') == {"t": 1e308, "s": 0.0}


def test_text_that_is_not_json_is_not_json() -> None:
    with pytest.raises(NotJson, match=r"^not UTF-8 text \(byte 1\)$"):
        parse_json(b"[\xff]")
    with pytest.raises(NotJson, match=r"^JSON syntax error at line 2, column 1: Expecting value"):
        parse_json("[1,\n")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**99), max_value=10**99)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
def test_ordinary_json_round_trips(value: object) -> None:
    assert parse_json(json.dumps(value)) == value
    assert parse_json(json.dumps(value).encode()) == value


@given(st.one_of(st.binary(max_size=200), st.text(alphabet='[]{}"\\:,0123456789-eE.aNI ')))
def test_no_input_raises_anything_but_our_error(data: str | bytes) -> None:
    try:
        parse_json(data)
    except InvalidConfig:
        pass


# The check of already parsed data (TOML), iterative at any depth.


def test_check_tree_refuses_deep_data_and_huge_integers_naming_the_path() -> None:
    deep: object = 1
    for _ in range(100_000):
        deep = {"a": deep}
    with pytest.raises(InvalidConfig, match=r"^\$\.t\.a\.a\.a\.a\.a\.a\.a\.\.\.\(64 steps\): "):
        check_tree({"t": deep})
    with pytest.raises(InvalidConfig, match=r"^\$\.x\[1\]\.p: an integer of more than 100"):
        check_tree({"x": [{"p": 1}, {"p": 10**100}]})
    check_tree({"x": [True, 10**100 - 1, -(10**100) + 1, "9" * 500, 1e300]})


# The reply parsers: a malformed reply is a bad reply, never RecursionError or ValueError.

HOSTILE = [
    BOMB.encode(),
    b'{"data": [{"id": ' + b"9" * 5000 + b"}]}",
    b'{"data": [], "data": []}',
    b'{"choices": [{"message": {"content": NaN}}]}',
    b"\xff\xfe",
]


@pytest.mark.parametrize("body", HOSTILE)
def test_lenient_probe_readers_read_nothing_from_a_hostile_body(body: bytes) -> None:
    assert json_object(body) is None
    assert parse_model_ids(body) == ()
    assert parse_ollama_version(body) is None
    assert classify_health(503, body) == Loading()


@pytest.mark.parametrize("body", HOSTILE)
def test_strict_reply_parsers_raise_a_bad_reply_for_a_hostile_body(body: bytes) -> None:
    with pytest.raises(BackendError, match=r"^deep health: completion body is not a JSON"):
        parse_completion(200, body)
    for parse in (parse_ps, parse_tags):
        with pytest.raises(BackendError, match=r"^ollama GET /api/(ps|tags): reply is not JSON"):
            parse(body)


def test_a_5000_digit_size_in_api_ps_names_its_path() -> None:
    body = b'{"models": [{"name": "m", "size_vram": ' + b"1" * 5000 + b"}]}"
    with pytest.raises(BackendError) as caught:
        ollama_object(body, "/api/ps")
    assert str(caught.value) == (
        "ollama GET /api/ps: reply is not JSON: "
        "$.models[0].size_vram: an integer of 5000 digits (at most 100)"
    )


@given(st.binary(max_size=300))
def test_every_reply_parser_answers_any_bytes_with_a_value_or_a_backend_error(
    body: bytes,
) -> None:
    parse_model_ids(body)
    parse_ollama_version(body)
    classify_health(503, body)
    for parse in (parse_ps, parse_tags, lambda b: parse_completion(200, b)):
        try:
            parse(body)
        except BackendError:
            pass
