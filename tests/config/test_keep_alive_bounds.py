"""``keep_alive`` is bounded as Ollama reads it, whatever its form, and a managed model is
never given one that unloads it at once (issue 9 item 7; ollama/ollama ``api/types.go``
``Duration.UnmarshalJSON``: a number is ``int(t) * time.Second``, a string
``time.ParseDuration``, both int64 nanoseconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.config import ManagedConfig
from inferactors._config.keep_alive import MAX_KEEP_ALIVE_S, check_keep_alive
from inferactors._errors import InvalidConfig

FIELD = "managed.keep_alive"


def managed(keep_alive: object) -> ManagedConfig:
    return ManagedConfig(Path("/r.json"), Path("/d"), keep_alive=keep_alive)  # type: ignore[arg-type]


def refusal(keep_alive: object) -> str:
    with pytest.raises(InvalidConfig) as info:
        managed(keep_alive).validate()
    return str(info.value)


@pytest.mark.parametrize("keep_alive", [0, "0", "-0", "+0", "0s", "-0s", "0.0h", "0m0s", "999ms"])
def test_a_managed_keep_alive_that_unloads_at_once_is_refused(keep_alive: str | int) -> None:
    message = refusal(keep_alive)
    assert message.startswith(FIELD)
    assert message.endswith(
        'would make Ollama unload the managed model at once; use at least "1s" '
        "(or -1 to keep it loaded)"
    )


def test_zero_is_still_a_keep_alive_ollama_accepts_from_others() -> None:
    """A foreign client's unload (the kit's timelines) is not ours to refuse."""
    for keep_alive in (0, "0", "0s"):
        check_keep_alive("step.keep_alive", keep_alive)


@pytest.mark.parametrize(
    "keep_alive",
    [MAX_KEEP_ALIVE_S + 1, -MAX_KEEP_ALIVE_S - 1, 10**30, -(10**30)],
)
def test_an_int_is_bounded_as_a_numeric_string_is(keep_alive: int) -> None:
    said = f"is out of range: Ollama reads whole seconds up to {MAX_KEEP_ALIVE_S} (either sign)"
    assert refusal(keep_alive).endswith(said)
    assert refusal(str(keep_alive)).endswith(said)
    assert refusal(str(keep_alive)).startswith(FIELD)


def test_an_int_too_long_to_print_is_refused_by_its_size() -> None:
    assert refusal(10**5000).startswith(f"{FIELD} (an int of 16610 bits) is out of range")
    assert "is out of range" in refusal("9" * 5000)


def test_the_largest_whole_seconds_are_accepted_in_both_forms() -> None:
    assert MAX_KEEP_ALIVE_S == 9223372036  # (2**63 - 1) nanoseconds, in whole seconds
    for keep_alive in (MAX_KEEP_ALIVE_S, str(MAX_KEEP_ALIVE_S), -MAX_KEEP_ALIVE_S, "-1"):
        managed(keep_alive).validate()


@pytest.mark.parametrize("keep_alive", ["2562048h", "-2562048h", "9223372037s", "1e3h"])
def test_a_duration_string_beyond_go_int64_is_refused(keep_alive: str) -> None:
    message = refusal(keep_alive)
    assert message.startswith(f'{FIELD} "{keep_alive}"')


def test_the_largest_go_duration_is_accepted() -> None:
    managed("2562047h47m16.854775807s").validate()  # 2**63 - 1 ns
    assert "out of range" in refusal("2562047h47m16.854775808s")


@pytest.mark.parametrize("keep_alive", [1.5, 3600.0, float("nan"), float("inf"), None])
def test_a_float_or_none_is_refused_not_crashed_on(keep_alive: object) -> None:
    message = refusal(keep_alive)
    assert message.startswith(f"{FIELD} must be a duration string or whole seconds (an int), not")
