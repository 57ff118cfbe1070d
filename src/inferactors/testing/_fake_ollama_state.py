"""The bookkeeping of the fake Ollama: pulled models, loaded runners, keep_alive and expiry.

Pure: every time is a float of trio seconds passed in by the caller; the HTTP side lives in
`inferactors.testing.fake_ollama`. The rules follow Ollama's scheduler (its
``server/sched.go``):

- a fresh load gets the request's keep_alive, else the default (``5m``);
- a request without keep_alive leaves a loaded runner's duration unchanged; one with a value
  replaces it; a negative value means forever (Go's largest duration, about 292 years);
- a runner is listed in ``/api/ps`` from the moment its load starts; until it first goes idle
  its ``expires_at`` reads as ``now + duration``;
- when its last request finishes, the idle timer restarts: ``expires_at = now + duration``;
  a duration of 0 unloads it then;
- an unload (keep_alive 0) unloads at once when idle, else after the last request; an
  unloading runner stays listed for ``linger_s`` more seconds (FC-21).
"""

from __future__ import annotations

import hashlib
import re

import attrs

from .._config.ollama_names import same_ollama_name

GO_FOREVER_S = (2**63 - 1) / 1e9
"""Go's largest ``time.Duration`` in seconds: what Ollama stores for a negative keep_alive."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
_UNITS["h"] = 3600.0
_PART = re.compile(r"([0-9]*\.?[0-9]*)([^0-9.]*)")


class BadDuration(ValueError):
    """A keep_alive Ollama would refuse with HTTP 400; the message is Go's."""


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string (``"30m"``, ``"1h30m"``, ``"-1.5h"``, ``"0"``).

    Raises:
        BadDuration: with Go's message, e.g. ``time: missing unit in duration "3600"``.
    """
    quoted = '"' + text + '"'
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or len(text) - len(body) > 1:
        raise BadDuration(f"time: invalid duration {quoted}")
    total = 0.0
    for number, unit in _PART.findall(body)[:-1]:  # findall ends with an empty match
        if number in ("", "."):
            raise BadDuration(f"time: invalid duration {quoted}")
        if not unit:
            raise BadDuration(f"time: missing unit in duration {quoted}")
        if unit not in _UNITS:
            raise BadDuration(f'time: unknown unit "{unit}" in duration {quoted}')
        total += float(number) * _UNITS[unit]
    return -total if text.startswith("-") else total


def keep_alive_seconds(value: object) -> float | None:
    """The duration a request's ``keep_alive`` asks for, as Ollama reads it (``api.Duration``).

    None (absent or JSON null) means "leave unchanged". A number is whole seconds, a string a
    Go duration; anything negative is `GO_FOREVER_S`; 0 means unload.

    Raises:
        BadDuration: a string Go cannot parse, or a value that is neither number nor string.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadDuration("invalid duration")
    seconds = parse_go_duration(value) if isinstance(value, str) else float(int(value))
    return GO_FOREVER_S if seconds < 0 else seconds


@attrs.frozen
class PulledModel:
    """A model the fake has "pulled": what ``/api/tags`` lists."""

    name: str
    digest: str
    size: int

    @classmethod
    def named(cls, name: str) -> PulledModel:
        """A pulled model with a digest and size derived from its full ``name``."""
        digest = hashlib.sha256(name.encode()).hexdigest()
        return cls(name=name, digest=digest, size=1_000_000 + int(digest[:4], 16))


@attrs.define(eq=False)
class Runner:
    """A loaded (or loading, or unloading) model.

    Attributes:
        name: the pulled model's full name.
        duration_s: keep_alive in float seconds (`GO_FOREVER_S` for forever).
        refs: requests using it, the load included.
        loading: True until the load finished.
        expires_at: trio time it unloads when idle; None until it first went idle.
        gone_at: trio time it leaves ``/api/ps``; None unless unloading.
    """

    name: str
    duration_s: float
    refs: int = 1
    loading: bool = True
    expires_at: float | None = None
    gone_at: float | None = None


@attrs.define(eq=False)
class ModelBook:
    """The fake daemon's models; build it with `ModelBook.create`."""

    pulled: dict[str, PulledModel]
    runners: dict[str, Runner] = attrs.Factory(dict)

    @classmethod
    def create(cls, names: tuple[str, ...]) -> ModelBook:
        """A book with ``names`` pulled (a missing tag reads as ``:latest``), none loaded."""
        models = (PulledModel.named(full_name(name)) for name in names)
        return cls(pulled={model.name: model for model in models})

    def find(self, name: str) -> PulledModel | None:
        """The pulled model called ``name`` as Ollama reads names (``m`` finds
        ``m:latest``, ``library/m`` and ``registry.ollama.ai/library/m`` too), or None."""
        found = self.pulled.get(full_name(name))
        same = (model for model in self.pulled.values() if same_ollama_name(name, model.name))
        return found or next(same, None)

    def sweep(self, now: float, linger_s: float) -> None:
        """Unload runners idle past their expiry; forget those whose lingering is over."""
        for runner in list(self.runners.values()):
            expires_at = runner.expires_at
            idle = runner.refs <= 0 and runner.gone_at is None
            if idle and expires_at is not None and expires_at <= now:
                runner.gone_at = expires_at + linger_s
            if runner.gone_at is not None and runner.gone_at <= now:
                del self.runners[runner.name]

    def start_load(self, name: str, duration_s: float) -> Runner:
        """Register a loading runner for ``name`` with one reference (the load request)."""
        runner = Runner(name=name, duration_s=duration_s)
        self.runners[name] = runner
        return runner

    def preload(self, name: str, duration_s: float, now: float) -> Runner:
        """A runner someone else loaded earlier, idle since ``now``."""
        runner = self.start_load(name, duration_s)
        runner.loading = False
        self.release(runner, now, 0.0)
        return runner

    def drop(self, runner: Runner) -> None:
        """Forget a runner whose load failed or was aborted: it is not loaded."""
        if self.runners.get(runner.name) is runner:
            del self.runners[runner.name]

    @staticmethod
    def use(runner: Runner, duration_s: float | None) -> None:
        """A request starts on a loaded runner; a keep_alive in it replaces the duration."""
        runner.refs += 1
        if duration_s is not None:
            runner.duration_s = duration_s

    @staticmethod
    def release(runner: Runner, now: float, linger_s: float) -> None:
        """A request on ``runner`` finished: restart its idle timer, or unload it if its
        duration is 0."""
        runner.refs -= 1
        if runner.refs > 0 or runner.gone_at is not None:
            return
        runner.expires_at = now + runner.duration_s
        if runner.duration_s <= 0:
            runner.gone_at = now + linger_s

    def expire(self, name: str, now: float, linger_s: float) -> None:
        """keep_alive 0 without a prompt: unload ``name`` now, or after its last request."""
        runner = self.runners.get(name)
        if runner is None or runner.gone_at is not None:
            return
        runner.duration_s = 0.0
        runner.expires_at = now
        if runner.refs <= 0:
            runner.gone_at = now + linger_s

    def listed(self, now: float) -> list[tuple[Runner, float]]:
        """Runners ``/api/ps`` shows with their ``expires_at`` (trio time), latest first."""
        shown = [(runner, _shown_expiry(runner, now)) for runner in self.runners.values()]
        return sorted(shown, key=lambda pair: pair[1], reverse=True)


def full_name(name: str) -> str:
    """``name`` with ``:latest`` added when it has no tag (``m`` -> ``m:latest``)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def _shown_expiry(runner: Runner, now: float) -> float:
    if runner.expires_at is None:
        return now + runner.duration_s
    return runner.expires_at
