"""Every admission problem of one instance at once, each naming its field.

A managed instance's checks (``run_as``, the model and its extras, the serve program, the
program's flags, the port, the API key file) are independent: `Problems` runs each,
keeps what each refuses, and `Problems.raise_any` raises one error listing them all, joined
with ``"; "``, so an operator fixes a run file in one pass rather than one problem per run.
The error is `InvalidConfig` when every problem is one (a malformed field), else
`AdmissionRefused`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._errors import AdmissionRefused, InvalidConfig

T = TypeVar("T")


class Problems:
    """The refusals met so far, in check order, each as ``"FIELD: why"``."""

    def __init__(self) -> None:
        self._found: list[tuple[str, AdmissionRefused | InvalidConfig]] = []

    def call(self, field: str, check: Callable[[], T]) -> T | None:
        """``check()``'s result, or None after recording its refusal under ``field``."""
        try:
            return check()
        except (AdmissionRefused, InvalidConfig) as error:
            self._found.append((field, error))
            return None

    async def wait(self, field: str, check: Awaitable[T]) -> T | None:
        """The awaited ``check``'s result, or None after recording its refusal."""
        try:
            return await check
        except (AdmissionRefused, InvalidConfig) as error:
            self._found.append((field, error))
            return None

    def has(self, field: str) -> bool:
        """Whether a check under ``field`` refused."""
        return any(name == field for name, _ in self._found)

    def any(self) -> bool:
        """Whether any check refused."""
        return bool(self._found)

    def raise_any(self) -> None:
        """Raise one error listing every problem recorded; nothing when there is none.

        Raises:
            InvalidConfig: every problem is a malformed field.
            AdmissionRefused: otherwise; the message lists all of them.
        """
        if not self._found:
            return
        lines = [_named(field, str(error)) for field, error in self._found]
        text = "; ".join(lines)
        if len(lines) > 1:
            text = f"{len(lines)} problems: {text}"
        if all(isinstance(error, InvalidConfig) for _, error in self._found):
            raise InvalidConfig(text) from self._found[0][1]
        raise AdmissionRefused(text) from self._found[0][1]


def _named(field: str, message: str) -> str:
    """``message`` led by ``field`` unless it already starts with it."""
    return message if message.startswith(field) else f"{field}: {message}"
