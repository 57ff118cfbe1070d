"""Why a server died, in its own words: classify what it printed (pure; no I/O).

A server that cannot start says why, last: llama-server ``gguf_init_from_reader: failed to
read magic``, ``error: invalid argument: --no-such-flag``, ``couldn't bind HTTP server
socket``; mlx_lm.server a Python traceback ending ``OSError: [Errno 98] Address already in
use``. `diagnose` reads those lines and returns a `Diagnosis` (``_stop_reasons``): the
`FaultKind`, the server's own line that matched, and its last lines. The patterns are the
real servers' (llama-server of llama-cpp-python 0.3.36 and mlx-lm 0.32.2, run on an empty,
truncated and random model, an unknown flag, a port taken; and texts from the llama.cpp,
Ollama and mlx-lm trackers); the transcripts are kept under ``tests/policy/startup_texts/``.

How a line is read:

* llama.cpp's log prefix (``0.00.005.544 E ``) and Python logging's time stamp are
  dropped; lines logged below error level (llama.cpp's ``I``, ``W``, ``D``; Python's
  ``INFO``, ``DEBUG``, ``WARNING``) and any line that says ``warning`` never count:
  ``warning: failed to mlock`` is not a fault.
* Inside a Python traceback only the exception line counts (the first unindented line
  after the frames); the frames quote code, not a reason. A traceback that
  ``socketserver`` prints for one failed request is not a start-up fault.
* Strong patterns (a named cause) beat weak ones (``failed to load model``, a bare
  traceback); among strong lines the first wins, since what follows is its consequence.
  Within one line the kinds are tried in the order of `_RULES` (``Permission denied``
  before a bad model file: llama-server says ``failed to open GGUF file ... (Permission
  denied)``).

`StartupWatch` is the same reading fed line by line, for a server that prints its reason
and hangs (mlx_lm.server whose bind failed): `LIVE_FATAL` kinds are the ones worth stopping
a living process for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import attrs

from .._errors import cut
from .._stop_reasons import Diagnosis, FaultKind, StopReason

LINE_CHARS = 300
"""How much of the server's line a diagnosis quotes (characters)."""

LAST_LINES = 20
"""How many of the server's last non-empty lines a diagnosis keeps."""


LIVE_FATAL = frozenset({FaultKind.ADDRESS_IN_USE, FaultKind.CANNOT_BIND})
"""Kinds that end a start-up even while the process lives: without its socket a server can
never serve (mlx_lm.server prints the bind error and hangs). Other kinds are left to the
process's own exit, or to the readiness deadline and the health checks."""


_I = re.IGNORECASE
_RULES: tuple[tuple[FaultKind, re.Pattern[str]], ...] = (
    (
        FaultKind.ADDRESS_IN_USE,
        re.compile(r"address already in use|\bEADDRINUSE\b|\[Errno (98|48)\]", _I),
    ),
    (
        FaultKind.CANNOT_BIND,
        re.compile(
            r"couldn't bind|could not bind|cannot bind|failed to bind|unable to bind"
            r"|cannot assign requested address|\[Errno 99\]",
            _I,
        ),
    ),
    (
        FaultKind.MISSING_LIBRARY,
        re.compile(
            r"error while loading shared libraries|cannot open shared object file"
            r"|^(ModuleNotFoundError|ImportError)\b|Library not loaded",
        ),
    ),
    (
        FaultKind.INVALID_FLAG,
        re.compile(
            r"^error: invalid argument: |^error while handling argument|^error: unknown value"
            r"|^[\w.\-]+: error: (unrecognized arguments|argument |the following arguments"
            r"|invalid choice|ambiguous option)",
        ),
    ),
    (
        FaultKind.PERMISSION_DENIED,
        re.compile(r"permission denied|operation not permitted|\[Errno (13|1)\]|\bEACCES\b", _I),
    ),
    (
        FaultKind.OUT_OF_MEMORY,
        re.compile(
            r"out of memory|failed to allocate|unable to allocate|cudaMalloc failed"
            r"|bad_alloc|^MemoryError\b|cannot allocate memory|insufficient memory|\[Errno 12\]"
            r"|not enough space in the buffer",
            _I,
        ),
    ),
    (
        FaultKind.BAD_MODEL_FILE,
        re.compile(
            r"gguf_init_from_|invalid magic|failed to read magic|error loading model"
            r"|unknown model architecture|\[load_safetensors\]|\[load\] |No safetensors found"
            r"|Missing \d+ parameters|parameters not in model|Unable to read \d+ bytes"
            r"|SafetensorError|HeaderTooLarge|not within the file bounds|invalid gguf"
            r"|failed to open GGUF file",
            _I,
        ),
    ),
)

_WEAK_RULES: tuple[tuple[FaultKind, re.Pattern[str]], ...] = (
    (
        FaultKind.BAD_MODEL_FILE,
        re.compile(r"failed to load model|exiting due to model loading error", _I),
    ),
)

LLAMA_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([A-Z]) ")
"""llama.cpp's log prefix (``0.00.015.172 I ``), its level letter captured."""
_LOGGING_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - ")
_LOGGING_BELOW_ERROR = re.compile(r"^(DEBUG|INFO|WARNING) - ")
_BLANKS = re.compile(r"[ \t]+")
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI: colours, cursor moves (7- and 8-bit)
    r"|(?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape: ESC, intermediates, one final character
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TRACEBACK = "Traceback (most recent call last):"
_REQUEST_ERROR = "Exception occurred during processing of request"


def strip_escapes(text: str) -> str:
    """``text`` without terminal escapes of every ECMA-48 class, in their 7-bit (``ESC``)
    and 8-bit (C1) forms: control sequences (CSI: ``\\033[31m``), control strings (OSC
    ``\\033]0;title\\007`` or ended by ``ESC \\``, DCS, SOS, PM, APC; one left unterminated
    runs to the end of ``text``) and any other escape (``ESC`` and one final character)."""
    return _ESCAPES.sub("", text)


def clean(line: str, limit: int = LINE_CHARS) -> str:
    """``line`` without terminal escapes (`strip_escapes`), control characters, runs of
    blanks and log prefixes (llama.cpp's, Python logging's time stamp), cut to about
    ``limit`` characters (`_errors.cut`)."""
    text = _BLANKS.sub(" ", _CONTROL.sub("", strip_escapes(line))).strip()
    text = _LOGGING_STAMP.sub("", LLAMA_PREFIX.sub("", text))
    return cut(text, limit)


def last_lines(lines: Iterable[str], count: int = LAST_LINES) -> tuple[str, ...]:
    """The last ``count`` non-empty lines of ``lines``, each `clean`ed."""
    kept = [clean(line) for line in lines if line.strip()]
    return tuple(kept[-count:])


def output_lines(stdout: str, stderr: str) -> list[str]:
    """The lines of a process's two captured tails, standard output first: a server
    prints its reason last, and on standard error."""
    return [*stdout.splitlines(), *stderr.splitlines()]


def diagnose(lines: Sequence[str]) -> Diagnosis | None:
    """Classify a server's output (its last lines, oldest first); None when nothing matches.

    The first line that a strong rule matches gives the diagnosis; failing that the first
    weak match (``failed to load model``: a bad model file; a Python traceback whose
    exception no rule names: ``python traceback`` with that exception line).
    """
    watch = StartupWatch()
    for line in lines:
        watch.feed(line)
    found = watch.strong or watch.weak
    if found is None:
        return None
    return attrs.evolve(found, last_lines=last_lines(lines))


_DIAGNOSED = frozenset(
    {
        StopReason.CRASH,
        StopReason.STARTUP_FAILURE,
        StopReason.READINESS_TIMEOUT,
        StopReason.HEALTH_KILL,
    }
)


@attrs.frozen
class ExitReading:
    """What an exit's output says: the stop reason to report, the diagnosis (None when
    nothing matched or the exit was asked for) and the last non-empty lines."""

    reason: StopReason
    diagnosis: Diagnosis | None
    last_lines: tuple[str, ...]


def read_exit(
    reason: StopReason, *, ever_ready: bool, live: Diagnosis | None, stdout: str, stderr: str
) -> ExitReading:
    """Read a finished process's output tails (``stdout``, ``stderr``) for why it ended.

    Exits we asked for (a stop, an unload, an exposure stop) get no diagnosis: their last
    lines are the server shutting down. A ``crash`` of a process that was never Running
    (``ever_ready`` False) whose output matched becomes a ``start-up failure``; after
    Running (an out-of-memory on the first request) it stays a ``crash``, diagnosed.
    ``live`` is the diagnosis that stopped it while it still ran (`StartupWatch`), which
    wins over a new reading of its output.
    """
    lines = output_lines(stdout, stderr)
    tail = last_lines(lines)
    if reason not in _DIAGNOSED:
        return ExitReading(reason, None, tail)
    found = live or diagnose(lines)
    if found is None:
        return ExitReading(reason, None, tail)
    if reason is StopReason.CRASH and not ever_ready:
        reason = StopReason.STARTUP_FAILURE
    return ExitReading(reason, attrs.evolve(found, last_lines=tail), tail)


@attrs.define
class StartupWatch:
    """`diagnose` line by line: feed each complete line as it arrives.

    Attributes:
        strong: the first diagnosis a strong rule gave, else None.
        weak: the first weak one, else None.
    """

    strong: Diagnosis | None = None
    weak: Diagnosis | None = None
    _in_traceback: bool = False
    _skip_traceback: bool = False
    _previous: str = ""

    def feed(self, raw: str) -> Diagnosis | None:
        """Read one line; return its diagnosis when a strong rule matches it, else None.
        Terminal escapes are dropped first (`strip_escapes`): a title or colour before
        ``error:`` must not hide it."""
        raw = strip_escapes(raw)
        previous, self._previous = self._previous, raw
        if raw.startswith(_TRACEBACK):
            self._in_traceback = True
            self._skip_traceback = _REQUEST_ERROR in previous
            return None
        if self._in_traceback:
            if not raw.strip() or raw[:1].isspace():
                return None  # a frame, its code, or its caret line
            self._in_traceback = False
            if self._skip_traceback:
                return None
            return self._read(raw, traceback=True)
        return self._read(raw, traceback=False)

    def _read(self, raw: str, *, traceback: bool) -> Diagnosis | None:
        if _not_an_error(raw):
            return None
        line = clean(raw)
        kind = _match(_RULES, line)
        if kind is not None:
            found = Diagnosis(kind, line)
            self.strong = self.strong or found
            return found
        weak = _match(_WEAK_RULES, line)
        if weak is None and traceback:
            weak = FaultKind.PYTHON_TRACEBACK
        if weak is not None and self.weak is None:
            self.weak = Diagnosis(weak, line)
        return None


def _not_an_error(raw: str) -> bool:
    """llama.cpp lines logged below error level, and warnings of any program."""
    level = LLAMA_PREFIX.match(raw)
    if level is not None and level.group(1) != "E":
        return True
    if _LOGGING_BELOW_ERROR.match(_LOGGING_STAMP.sub("", raw)):
        return True
    return "warning" in raw.lower()


def _match(rules: tuple[tuple[FaultKind, re.Pattern[str]], ...], line: str) -> FaultKind | None:
    for kind, pattern in rules:
        if pattern.search(line):
            return kind
    return None
