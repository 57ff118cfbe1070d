"""Ollama's ``keep_alive``, checked as Ollama reads it (``api.Duration.UnmarshalJSON``).

Ollama takes a JSON number as whole seconds (``int(t) * time.Second``: negative means
forever, and a number above `MAX_KEEP_ALIVE_S` overflows Go's int64 nanoseconds) and a
string as a Go duration (``time.ParseDuration``, which refuses one beyond int64
nanoseconds); ``"-1"`` and ``"3600"`` are read by us as that int and sent as a number
(``_policy/ollama_parse.keep_alive_json``). So an int, a numeric string and
a duration string are bounded alike. A managed model must also stay loaded: a keep_alive
under one second (``0``, ``"0s"``, ``"300ms"``) would unload it at once
(`check_managed_keep_alive`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from .._errors import InvalidConfig, cut

NS_PER_S = 10**9
_GO_MAX_NS = 2**63 - 1

MAX_KEEP_ALIVE_S = _GO_MAX_NS // NS_PER_S
"""Largest whole seconds Ollama reads from a number without overflow (9223372036, about
292 years); the bound of an int or numeric-string keep_alive, either sign."""

_SECONDS = re.compile(r"[+-]?[0-9]+")
_GO_DURATION = re.compile(r"-?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|ms|s|m|h))+")
_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": NS_PER_S, "m": 60 * NS_PER_S}
_UNIT_NS["h"] = 3600 * NS_PER_S


def check_keep_alive(field: str, keep_alive: str | int) -> None:
    """Raise `InvalidConfig` naming ``field`` unless Ollama accepts ``keep_alive``: an int
    or a string of whole seconds (``"-1"``, ``"3600"``) within ±`MAX_KEEP_ALIVE_S`, or a Go
    duration string (``"30m"``, ``"1h30m"``, ``"-1m"``, ``"0"``) within Go's int64
    nanoseconds. A bool or a float is refused (whole seconds)."""
    _nanoseconds(field, keep_alive)


def check_managed_keep_alive(field: str, keep_alive: str | int) -> None:
    """`check_keep_alive`, and refuse a keep_alive that would unload the model we load at
    once: zero or under one second (negative is forever, and fine)."""
    ns = _nanoseconds(field, keep_alive)
    if 0 <= ns < NS_PER_S:
        raise InvalidConfig(
            f"{field} {_shown(keep_alive)} would make Ollama unload the managed model at "
            'once; use at least "1s" (or -1 to keep it loaded)'
        )


def _nanoseconds(field: str, keep_alive: object) -> int:
    if isinstance(keep_alive, bool) or not isinstance(keep_alive, int | str):
        raise InvalidConfig(
            f"{field} must be a duration string or whole seconds (an int), "
            f"not {type(keep_alive).__name__} {cut(repr(keep_alive))}"
        )
    digits = _SECONDS.fullmatch(keep_alive) if isinstance(keep_alive, str) else None
    if isinstance(keep_alive, int) or digits is not None:
        seconds = _whole_seconds(keep_alive)
        if abs(seconds) > MAX_KEEP_ALIVE_S:
            raise InvalidConfig(
                f"{field} {_shown(keep_alive)} is out of range: Ollama reads whole seconds "
                f"up to {MAX_KEEP_ALIVE_S} (either sign)"
            )
        return seconds * NS_PER_S
    if not _GO_DURATION.fullmatch(keep_alive):
        raise InvalidConfig(
            f'{field} {_shown(keep_alive)} is not a duration such as "30m" or "1h", nor '
            'whole seconds such as "3600" or "-1"'
        )
    ns = _go_duration_ns(keep_alive)
    if ns > _GO_MAX_NS or ns < -_GO_MAX_NS - 1:
        raise InvalidConfig(
            f"{field} {_shown(keep_alive)} is out of range: Go durations end at about "
            "2562047h (int64 nanoseconds)"
        )
    return ns


def _whole_seconds(keep_alive: str | int) -> int:
    """An int, or a numeric string's value; one too long to be in range (its 4300-digit
    conversion would raise) counts as `MAX_KEEP_ALIVE_S` + 1."""
    if isinstance(keep_alive, int):
        return keep_alive
    significant = keep_alive.lstrip("+-").lstrip("0")
    return int(keep_alive) if len(significant) <= 20 else MAX_KEEP_ALIVE_S + 1


def _go_duration_ns(text: str) -> int:
    """Nanoseconds of a string `_GO_DURATION` matched, each part's fraction truncated as
    Go's ``time.ParseDuration`` does (exact, so the int64 bound is exact)."""
    total = 0
    for whole, fraction, unit in _PART.findall(text):
        scale = _UNIT_NS[unit]
        part = Fraction(int(whole or "0")) + Fraction(int(fraction or "0"), 10 ** len(fraction))
        total += int(part * scale)
    return -total if text.startswith("-") else total


def _shown(keep_alive: str | int) -> str:
    if isinstance(keep_alive, str):
        return f'"{cut(keep_alive)}"'
    bits = keep_alive.bit_length()
    return str(keep_alive) if bits <= 128 else f"(an int of {bits} bits)"
