"""What Ollama's replies mean: its model values, request bodies, reply parsing and `ExpiryWatch`.

The pure layer of the Ollama client: `keep_alive_json`, `same_tag`,
`load_body`, `unload_body`, `check_load_reply`, `parse_tags`, `parse_ps`, `parse_expiry`, the
values they return (`OllamaModel`, `LoadedModel`) and `ExpiryWatch`; no I/O. The HTTP edge
that uses them is `ollama_client.OllamaClient`.

Errors::

    BackendError (inferactors._errors)
    └── OllamaLoadTimeout   a load did not finish: the runner timed out or our
                            load request ran out of ``load_timeout_s`` (also TimeoutError)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Literal, TypeAlias

import attrs

from .._config.ollama_names import same_ollama_name
from .._errors import BackendError, InvalidConfig
from .._safe_json import NotJson, parse_json

RUNNER_TIMEOUT_TEXT = "timed out waiting for llama runner to start"
"""Ollama's error text when its runner did not start within OLLAMA_LOAD_TIMEOUT."""

_SNIPPET_CHARS = 200
_I64 = re.compile(r"[+-]?[0-9]+")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class OllamaLoadTimeout(BackendError, TimeoutError):
    """An Ollama load did not finish: its runner timed out starting (HTTP 500 "timed out
    waiting for llama runner to start") or the load request outlived
    ``load_timeout_s``. The daemon itself is alive; do not retry blindly."""

    code = "ollama-load-timeout"


@attrs.frozen
class OllamaModel:
    """A pulled model as ``/api/tags`` lists it.

    Attributes:
        name: ``models[].name`` (``"llama3.2:latest"``).
        model: ``models[].model``; equal to ``name`` on current servers.
        digest: sha256 of the manifest, or None if absent.
        size: bytes on disk, or None if absent.
        format: ``details.format`` (``"gguf"``), or None if absent.
        remote_host: where a cloud model runs (``remote_host``, e.g.
            ``"https://ollama.com:443"``); None for a local model.
        remote_model: the cloud model's name there (``remote_model``), or None.
    """

    name: str
    model: str
    digest: str | None = None
    size: int | None = None
    format: str | None = None
    remote_host: str | None = None
    remote_model: str | None = None

    @property
    def cloud(self) -> bool:
        """A cloud model: Ollama runs it on ``remote_host``, nothing is loaded locally."""
        return self.remote_host is not None


@attrs.frozen
class LoadedModel:
    """A model resident in memory as ``/api/ps`` lists it.

    Attributes:
        name, model, digest: as in `OllamaModel`.
        expires_at: when Ollama will unload it (``expires_at``): an aware datetime, or the raw
            string if it does not parse, or None if absent. "Forever" is a date centuries away.
        size_vram: bytes in GPU memory, or None if absent.
    """

    name: str
    model: str
    digest: str | None = None
    expires_at: datetime | str | None = None
    size_vram: int | None = None


ExpiryVerdict: TypeAlias = Literal["kept", "changed", "gone"]


@attrs.frozen
class ExpiryWatch:
    """Notices a foreign client changing our model's keep_alive; pure.

    Ollama restarts a model's idle timer whenever a request on it finishes, so ``expires_at``
    legitimately moves forward by at most the time elapsed (our own deep health does this).
    A foreign request with another keep_alive moves it backward (``"5m"`` after our ``-1``) or
    further forward than time has passed (``-1`` after our ``"30m"``). The watch therefore
    accepts a changed ``expires_at`` only within ``[baseline + checked_s - slack_s,
    baseline + elapsed_s + slack_s]``, where ``baseline`` is the ``expires_at`` seen right
    after our load and ``checked_s`` is when the previous value was last seen: a request that
    finished since then set ``now + duration``. Unparsed (string) expiries compare by
    equality. Keep the watch that `observe` returns.

    Attributes:
        baseline: ``expires_at`` from ``/api/ps`` right after our load returned.
        last: the latest accepted ``expires_at``.
        checked_s: float seconds after the baseline at which ``last`` was last seen.
        slack_s: float seconds of tolerance for request latency and clock differences.
    """

    baseline: datetime | str | None
    last: datetime | str | None
    checked_s: float = 0.0
    slack_s: float = 5.0

    @classmethod
    def after_load(cls, loaded: LoadedModel, *, slack_s: float = 5.0) -> ExpiryWatch:
        """Start watching from ``loaded``, the ``/api/ps`` entry read right after our load."""
        return cls(loaded.expires_at, loaded.expires_at, 0.0, slack_s)

    def observe(
        self, loaded: LoadedModel | None, elapsed_s: float
    ) -> tuple[ExpiryWatch, ExpiryVerdict]:
        """Judge a later ``/api/ps`` entry (None: the model is not listed any more).

        Args:
            loaded: the model's entry now, or None when ``/api/ps`` no longer lists it.
            elapsed_s: float seconds (trio time) since the baseline was read.

        Returns:
            The watch to keep and ``"kept"`` (our keep_alive still holds), ``"changed"``
            (someone else changed it: ownership lost) or ``"gone"`` (unloaded).
        """
        if loaded is None:
            return self, "gone"
        seen = loaded.expires_at
        if seen != self.last and not self._plausible(seen, elapsed_s):
            return self, "changed"
        return attrs.evolve(self, last=seen, checked_s=max(self.checked_s, elapsed_s)), "kept"

    def _plausible(self, seen: datetime | str | None, elapsed_s: float) -> bool:
        if not isinstance(seen, datetime) or not isinstance(self.baseline, datetime):
            return False
        moved_s = (seen - self.baseline).total_seconds()
        return self.checked_s - self.slack_s <= moved_s <= elapsed_s + self.slack_s


def keep_alive_json(value: str | int) -> int | str:
    """The JSON value of a keep_alive: an int, or a string that parses as a 64-bit integer
    (``"-1"`` -> -1), is sent as a number; anything else (``"30m"``) as the string.

    Raises:
        InvalidConfig: ``value`` is a bool.
    """
    if isinstance(value, bool):
        raise InvalidConfig("keep_alive must be a duration string or whole seconds, not a bool")
    if isinstance(value, int):
        return value
    if _I64.fullmatch(value) and _I64_MIN <= int(value) <= _I64_MAX:
        return int(value)
    return value


def same_tag(a: str, b: str) -> bool:
    """Whether two Ollama names are the same model as Ollama reads them: registry host,
    ``library/`` namespace and ``:latest`` tag filled in, case-blind (``"qwen2.5"`` is
    ``"registry.ollama.ai/library/qwen2.5:latest"``; ``"qwen"`` is not ``"qwen2.5:0.5b"``;
    ``"user/m"`` is not ``"m"``). See `inferactors._config.ollama_names`."""
    return same_ollama_name(a, b)


def load_body(tag: str, keep_alive: str | int) -> dict[str, object]:
    """``{"model": tag, "prompt": "", "stream": false, "keep_alive": K}`` with K from
    `keep_alive_json`."""
    return {"model": tag, "prompt": "", "stream": False, "keep_alive": keep_alive_json(keep_alive)}


def unload_body(tag: str) -> dict[str, object]:
    """``{"model": tag, "keep_alive": 0}``."""
    return {"model": tag, "keep_alive": 0}


def check_load_reply(status: int, body: bytes) -> None:
    """Accept an HTTP 200 load reply; raise for anything else.

    Raises:
        OllamaLoadTimeout: a non-200 reply whose text contains `RUNNER_TIMEOUT_TEXT`.
        BackendError: any other non-200 reply; the message is
            ``"ollama load returned HTTP c: <first 200 chars of body>"``.
    """
    if status == 200:
        return
    message = f"ollama load returned HTTP {status}: {snippet(body)}"
    if RUNNER_TIMEOUT_TEXT in body.decode("utf-8", errors="replace").lower():
        raise OllamaLoadTimeout(message)
    raise BackendError(message)


def parse_tags(body: bytes) -> tuple[OllamaModel, ...]:
    """`OllamaModel` s from an ``/api/tags`` body; entries with neither a string ``name`` nor
    a string ``model`` are skipped, and either fills in for the other. A non-empty string
    ``remote_host`` marks a cloud model.

    Raises:
        BackendError: the body is not a JSON object with a ``models`` list.
    """
    return tuple(
        OllamaModel(
            name,
            model,
            _str(entry, "digest"),
            _int(entry, "size"),
            _format(entry),
            _str(entry, "remote_host") or None,
            _str(entry, "remote_model") or None,
        )
        for entry, name, model in _entries(body, "/api/tags")
    )


def parse_ps(body: bytes) -> tuple[LoadedModel, ...]:
    """`LoadedModel` s from an ``/api/ps`` body, in the server's order.

    Raises:
        BackendError: the body is not a JSON object with a ``models`` list.
    """
    return tuple(
        LoadedModel(
            name,
            model,
            _str(entry, "digest"),
            parse_expiry(entry.get("expires_at")),
            _int(entry, "size_vram"),
        )
        for entry, name, model in _entries(body, "/api/ps")
    )


def parse_expiry(value: object) -> datetime | str | None:
    """An ``expires_at`` value: an aware datetime when it is RFC 3339 (Go's format, any number
    of fractional digits), the raw string otherwise, None when it is not a string."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    return parsed if parsed.tzinfo is not None else value


def json_object(body: bytes, path: str) -> dict[str, object]:
    """The JSON object of Ollama's reply to ``GET path``, read by
    `inferactors._safe_json.parse_json` (nesting, duplicate keys and huge integers refused).

    Raises:
        BackendError: the body is not JSON or not an object; the message names ``path``
            and the first 200 characters, or the parser's refusal with its JSON path
            (``"ollama GET /api/ps: reply is not JSON: $.models[0].size: an integer of
            5000 digits (at most 100)"``).
    """
    try:
        document = parse_json(body)
    except NotJson:
        raise BackendError(f"ollama GET {path}: reply is not JSON: {snippet(body)}") from None
    except InvalidConfig as exc:
        raise BackendError(f"ollama GET {path}: reply is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BackendError(f"ollama GET {path}: reply is not a JSON object: {snippet(body)}")
    return document


def _entries(body: bytes, path: str) -> list[tuple[Mapping[str, object], str, str]]:
    models = json_object(body, path).get("models")
    if not isinstance(models, list):
        raise BackendError(f"ollama GET {path}: reply has no models list")
    found: list[tuple[Mapping[str, object], str, str]] = []
    for entry in models:
        if not isinstance(entry, dict):
            continue
        name, model = _str(entry, "name"), _str(entry, "model")
        if name is not None or model is not None:
            found.append((entry, name or model or "", model or name or ""))
    return found


def _str(entry: Mapping[str, object], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) else None


def _int(entry: Mapping[str, object], key: str) -> int | None:
    value = entry.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _format(entry: Mapping[str, object]) -> str | None:
    details = entry.get("details")
    return _str(details, "format") if isinstance(details, dict) else None


def snippet(body: bytes) -> str:
    """The first 200 characters of ``body`` (undecodable bytes replaced), for messages."""
    return body.decode("utf-8", errors="replace")[:_SNIPPET_CHARS]
