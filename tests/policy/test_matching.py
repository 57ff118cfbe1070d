"""Model-name matching (seed-behaviour.md section 3 "Model matching", checklist item 27)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._policy.matching import lists, same_model

_names = st.text(min_size=1, max_size=30).filter(lambda n: not n.startswith(":"))  # real tags
_ascii_names = st.text(alphabet="abcdefgXYZ0123456789-_.", min_size=1, max_size=20)
_segments = st.text(alphabet="abcdefgXYZ0123456789-_.:", max_size=15)


@pytest.mark.parametrize(
    ("wanted", "listed"),
    [
        ("Llama-3.2-1B-Instruct", "Llama-3.2-1B-Instruct-Q4_K_M.gguf"),
        ("Qwen3-Coder-Next-4bit", "mlx-community/Qwen3-Coder-Next-4bit"),
        ("m", "m:latest"),
        ("m:latest", "m"),
        ("llama3.2", "llama3.2:latest"),
        ("tiny", "/models/TINY.GGUF"),
        ("llama-3.2-1b-instruct", "/srv/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf"),
        ("", ""),
    ],
)
def test_reference_examples_match(wanted: str, listed: str) -> None:
    assert same_model(wanted, listed)


@pytest.mark.parametrize(
    ("wanted", "listed"),
    [
        ("Qwen3-Coder", "Llama-3.2-1B-Instruct-Q4_K_M.gguf"),
        # rule 3 looks only at the last "/" segment, never the directories
        ("models", "/models/tiny.gguf"),
        ("mlx-community/Qwen3", "mlx-community/Qwen3-Coder-Next-4bit"),
        # ":latest" is stripped, other tags are not
        ("m:7b", "m:latest"),
        ("m:latest", "n:latest"),
        # ".gguf" is stripped from the listed side only, so it cannot be the matched text
        ("tiny.gguf.q4", "tiny.gguf"),
        # an empty wanted name is not a substring match for everything
        ("", "anything.gguf"),
    ],
)
def test_non_matches(wanted: str, listed: str) -> None:
    assert not same_model(wanted, listed)


@given(_names)
def test_a_name_matches_itself(name: str) -> None:
    assert same_model(name, name)


@given(_names)
def test_latest_is_optional_on_either_side(name: str) -> None:
    assert same_model(name, f"{name}:latest")
    assert same_model(f"{name}:latest", name)


@given(_ascii_names.filter(lambda n: "/" not in n), _segments, _segments, _segments)
def test_listed_basename_containing_the_name_matches_in_any_case(
    wanted: str, directory: str, before: str, after: str
) -> None:
    listed = f"{directory}/{before}{wanted.upper()}{after}.gguf"
    assert same_model(wanted.lower(), listed)
    assert same_model(wanted, listed.swapcase())


@given(
    st.text(alphabet="abc", min_size=1, max_size=10),
    st.text(alphabet="xyz/.:", max_size=20),
)
def test_disjoint_names_never_match(wanted: str, listed: str) -> None:
    assert not same_model(wanted, listed)


@given(st.lists(_names, max_size=5), _names)
def test_lists_is_any_same_model(models: list[str], wanted: str) -> None:
    assert lists(models, wanted) == any(same_model(wanted, m) for m in models)


@given(_names)
def test_an_empty_list_lists_nothing(wanted: str) -> None:
    assert not lists([], wanted)


def test_lists_finds_the_one_matching_id_among_others() -> None:
    served = ["mistral:7b", "llama3.2:latest", "qwen2.5:0.5b"]
    assert lists(served, "llama3.2")
    assert not lists(served, "phi3")
