"""The checks a timeline step's fields pass when the step is made (pure).

Each check raises `StepFieldError`, a ValueError that names the field, so that reading a
timeline from data can say ``$.steps[0].for_s: must be >= 0, got -1.0`` and a step built
in Python fails at once with ``for_s: must be >= 0, got -1.0``. Everything a fake would
fail on at start (a signal name, an address it cannot bind, a keep_alive Ollama refuses, a
number that is not finite) is refused here, when the timeline is made.
"""

from __future__ import annotations

import ipaddress
import json
import math
import signal
from collections.abc import Callable
from typing import Any

import attrs

from .._errors import InvalidConfig
from .._policy.ollama_parse import keep_alive_json
from ._fake_ollama_state import BadDuration, parse_go_duration

Check = Callable[[Any, "attrs.Attribute[Any]", Any], None]

FAKE_HOST = "127.0.0.1"
"""The address every fake listens on; `BindBeyondLoopback` needs another one."""


class StepFieldError(ValueError):
    """A step's ``field`` (None: the step as a whole) is invalid for ``reason``."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason if field is None else f"{field}: {reason}")
        self.field = field
        self.reason = reason


def duration(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    """A finite number of seconds, >= 0 (None passes: "forever" or "unset")."""
    if value is None:
        return
    if not math.isfinite(value):
        raise StepFieldError(attribute.name, f"must be a finite number of seconds, got {value}")
    if value < 0:
        raise StepFieldError(attribute.name, f"must be >= 0, got {value}")


def at_least(bound: int) -> Check:
    """An int >= ``bound`` (None passes)."""

    def check(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is not None and value < bound:
            raise StepFieldError(attribute.name, f"must be >= {bound}, got {value}")

    return check


def within(low: int, high: int) -> Check:
    """An int from ``low`` to ``high`` (None passes)."""

    def check(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is not None and not low <= value <= high:
            raise StepFieldError(attribute.name, f"must be {low} to {high}, got {value}")

    return check


def to_signal_name(value: object) -> object:
    """A signal given as a number or a `signal.Signals` member, as its name (``15`` and
    ``signal.SIGTERM`` give ``"SIGTERM"``); anything else unchanged, for `signal_name` to
    judge."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            return str(value)
    return value


def signal_name(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """A `signal.Signals` name such as ``"SIGABRT"`` (None passes; a number or a member is
    turned into its name first by `to_signal_name`)."""
    if value is not None and value not in signal.Signals.__members__:
        shown = json.dumps(value)
        raise StepFieldError(attribute.name, f"unknown signal {shown} (a name like SIGABRT)")


def beyond_loopback_host(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    """An address a fake can bind besides its own 127.0.0.1: all interfaces (``0.0.0.0``,
    ``::``) or another loopback address (``127.0.0.2``, ``::1``)."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        address = None
    usable = address is not None and (address.is_unspecified or address.is_loopback)
    if usable and str(address) != FAKE_HOST:
        return
    accepted = '"0.0.0.0" or "::" (all interfaces) or a loopback address other than 127.0.0.1'
    raise StepFieldError(attribute.name, f"must be {accepted}, got {json.dumps(value)}")


def keep_alive(_: object, attribute: attrs.Attribute[Any], value: str | int) -> None:
    """What Ollama takes as ``keep_alive``: whole seconds (``300``, ``"300"``, ``-1``: forever)
    or a Go duration (``"5m"``, ``"1h30m"``, ``"0"``)."""
    try:
        sent = keep_alive_json(value)
        if isinstance(sent, str):
            parse_go_duration(sent)
    except (InvalidConfig, BadDuration) as error:
        raise StepFieldError(
            attribute.name,
            f"{json.dumps(value)} is not a keep_alive Ollama accepts (whole seconds such as "
            f'300 or "300", negative for forever, or a duration such as "5m"): {error}',
        ) from None
