"""Model identity is exact, never a substring (issue 9 item 6, over the seed's loose rule 3).

llama-server lists its ``-m`` path or ``--alias`` verbatim (checked against the pinned
binary: ``-m /tmp/d/Tiny-Model.Q4.gguf`` lists ``/tmp/d/Tiny-Model.Q4.gguf``; ``-m
/proc/self/fd/7 --alias /srv/x/Tiny.gguf`` lists ``/srv/x/Tiny.gguf``), mlx_lm.server a repo
id or a path, Ollama its own names (``tests/config/test_ollama_names.py`` for the parser).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._flavor import InferFlavor
from inferactors._policy.matching import completion_model, lists, same_model

LLAMA, MLX, OLLAMA = InferFlavor.LLAMACPP, InferFlavor.MLX_LM, InferFlavor.OLLAMA

_names = st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=20)
_affixes = st.text(alphabet="abcXYZ019-_", min_size=1, max_size=8)


@pytest.mark.parametrize(
    ("wanted", "listed", "flavor"),
    [
        ("/models/tiny.gguf", "/models/tiny.gguf", LLAMA),  # the full path
        ("tiny.gguf", "/models/tiny.gguf", LLAMA),  # the basename
        ("tiny", "/models/tiny.gguf", LLAMA),  # the basename without .gguf
        ("tiny", "/models/tiny.GGUF", LLAMA),  # the suffix in any case
        ("tiny.gguf", "tiny", LLAMA),  # an alias without the suffix
        ("Llama-3.2-1B-Instruct-Q4_K_M", "/srv/Llama-3.2-1B-Instruct-Q4_K_M.gguf", LLAMA),
        ("Qwen3-Coder-Next-4bit", "mlx-community/Qwen3-Coder-Next-4bit", MLX),
        ("mlx-community/Qwen3-Coder-Next-4bit", "mlx-community/Qwen3-Coder-Next-4bit", MLX),
        ("qwen2.5", "qwen2.5:latest", OLLAMA),
        ("library/qwen2.5:latest", "qwen2.5", OLLAMA),
        ("Registry.Ollama.AI/library/qwen2.5", "qwen2.5:latest", OLLAMA),
        ("hf.co/org/repo:Q4_K_M", "hf.co/org/repo:Q4_K_M", OLLAMA),
        ("user/model", "registry.ollama.ai/user/model:latest", OLLAMA),
    ],
)
def test_the_same_model_under_its_listed_names(
    wanted: str, listed: str, flavor: InferFlavor
) -> None:
    assert same_model(wanted, listed, flavor)


@pytest.mark.parametrize(
    ("wanted", "listed", "flavor"),
    [
        ("llama", "codellama-34b", LLAMA),  # the case: a substring is not the model
        ("llama", "/models/codellama-34b.gguf", LLAMA),
        ("Llama-3.2-1B-Instruct", "/srv/Llama-3.2-1B-Instruct-Q4_K_M.gguf", LLAMA),
        ("tiny", "/models/TINY.gguf", LLAMA),  # ids are listed verbatim: case counts
        ("models", "/models/tiny.gguf", LLAMA),  # a directory is not the model
        ("/a/tiny.gguf", "/b/tiny.gguf", LLAMA),  # a path matches only itself
        ("Qwen3", "mlx-community/Qwen3-Coder-Next-4bit", MLX),
        ("mlx-community/Qwen3", "mlx-community/Qwen3-Coder-Next-4bit", MLX),
        ("", "anything.gguf", LLAMA),
        ("qwen", "qwen2.5:0.5b", OLLAMA),  # the case: not resident
        ("qwen2.5", "qwen2.5:0.5b", OLLAMA),  # latest is not another tag
        ("model", "user/model", OLLAMA),  # another namespace is another model
        ("hf.co/org/repo:Q4_K_M", "hf.co/org/repo:Q8_0", OLLAMA),
        ("llama", "codellama:latest", OLLAMA),
    ],
)
def test_other_models_never_match(wanted: str, listed: str, flavor: InferFlavor) -> None:
    assert not same_model(wanted, listed, flavor)


@given(_names, st.sampled_from([LLAMA, MLX, OLLAMA]))
def test_a_name_matches_itself(name: str, flavor: InferFlavor) -> None:
    assert same_model(name, name, flavor)


@given(_names, _affixes, _affixes, st.sampled_from(["", "/models/", "org/"]))
def test_a_name_never_matches_a_longer_name_that_contains_it(
    wanted: str, before: str, after: str, directory: str
) -> None:
    for listed in (before + wanted, wanted + after, before + wanted + after):
        assert not same_model(wanted, f"{directory}{listed}.gguf", LLAMA)
        assert not same_model(wanted, f"{directory}{listed}", MLX)


@given(st.lists(_names, max_size=5), _names, st.sampled_from([LLAMA, OLLAMA]))
def test_lists_is_any_same_model(models: list[str], wanted: str, flavor: InferFlavor) -> None:
    assert lists(models, wanted, flavor) == any(same_model(wanted, m, flavor) for m in models)


def test_lists_finds_the_one_matching_id_among_others() -> None:
    served = ["mistral:7b", "llama3.2:latest", "qwen2.5:0.5b"]
    assert lists(served, "llama3.2", OLLAMA)
    assert not lists(served, "qwen", OLLAMA)
    assert not lists([], "qwen", OLLAMA)


def test_deep_health_names_the_listed_id_that_is_our_model_not_a_lookalike() -> None:
    listed = ("/m/codellama-34b.gguf", "/m/llama.gguf")
    assert completion_model(LLAMA, listed, "llama") == "/m/llama.gguf"
    assert completion_model(LLAMA, listed[:1], "llama") == "llama"  # ours, not the lookalike
    assert completion_model(MLX, listed, "llama") is None
