"""The one exception tree of inferactors.

Every error the library raises on purpose derives from `InferactorsError`::

    InferactorsError
    ├── AdmissionRefused      a spec or model cannot run here (read-only checks said no)
    ├── InvalidConfig         a config, spec, manifest or argument is malformed (also ValueError)
    ├── InvalidState          the instance is not in a state that allows the command
    │   └── InstanceDown      it will not reach the state waited for (gave up, held down)
    ├── UnknownInstance       no instance with that id is loaded
    ├── BackendError          a server, process or file system call failed
    │   ├── DeepHealthTimeout the one-token completion did not finish in time (also TimeoutError)
    │   ├── StartTimeout      not Running within the caller's timeout (also TimeoutError)
    │   ├── NoVerdict         a deadline lost its verdict to our own late event loop
    │   └── RequestRefused    the server answered 401 or 403: it wants an API key, or not ours
    ├── Unsupported           the runtime does not do that in this mode
    ├── FrontDoorRefused      the front door cannot serve a request now (or ever)
    ├── BadRequest            a client's request to the front door is malformed
    └── ModelError            the model registry refused a name or a file
        ├── UnknownModel      no manifest with that name
        └── ModelNotReady     a shard is missing, resized or its BLAKE3 digest differs
            └── PinMismatch   a pinned file was tampered with (not merely missing)

Each class carries a stable ``code`` (the reference's error codes: ``admission-refused``,
``invalid-config``, ...) for logs and machine-readable output. ``str(error)`` is the message
alone; messages name the field, file or instance at fault.
"""

from __future__ import annotations

import enum
import re
from typing import ClassVar


class InferactorsError(Exception):
    """Base of every error inferactors raises on purpose."""

    code: ClassVar[str] = "inferactors"


class AdmissionRefused(InferactorsError):
    """The spec cannot run on this runtime (wrong flavor, port, model or format)."""

    code = "admission-refused"


class InvalidConfig(InferactorsError, ValueError):
    """A config, spec, manifest or argument is malformed; the message names the field."""

    code = "invalid-config"


class InvalidState(InferactorsError):
    """The instance's state does not allow the command (already running, not running, ...)."""

    code = "invalid-state"


class InstanceDown(InvalidState):
    """A wait cannot end as asked: the instance is down until an operator acts (its
    supervisor gave up, after a crash loop or the same start-up failure twice, or it is held
    down after a stop for exposure or a tampered model). ``why`` says which, as status
    does (``"gave up: restart budget spent (5 of 5)"``)."""

    code = "instance-down"

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


class UnknownInstance(InferactorsError):
    """No instance with that id is loaded in this runtime."""

    code = "unknown-instance"


class BackendError(InferactorsError):
    """A server, a process or the file system failed while carrying out a command."""

    code = "backend"


class DeepHealthTimeout(BackendError, TimeoutError):
    """The one-token completion of a deep health check took longer than its timeout."""

    code = "deep-health-timeout"


class StartTimeout(BackendError, TimeoutError):
    """An instance did not become Running within the caller's timeout
    (`InferRuntime.running`); the message says where it stood."""

    code = "start-timeout"


class NoVerdict(BackendError):
    """A deadline fired, but our own event loop lost more of its budget than the rule allows
    (``_policy/lateness.py``): nothing is known about the server. Not a failure of the
    server; check again soon."""

    code = "no-verdict"


class RequestRefused(BackendError):
    """The server refused our request with HTTP 401 or 403: it wants an API key we do not
    have, or refuses the one we sent (``serve.api_key_file``). ``refused`` is the status and
    the server's words, ``"HTTP 401: Invalid API Key"``."""

    code = "request-refused"

    def __init__(self, message: str, refused: str) -> None:
        super().__init__(message)
        self.refused = refused


class Unsupported(InferactorsError):
    """The runtime does not offer that operation in its mode (for example stop when adopted)."""

    code = "unsupported"


class ModelError(InferactorsError):
    """The model registry refused a name, a manifest or a file."""

    code = "model"


class UnknownModel(ModelError):
    """No manifest with that name is in the registry."""

    code = "unknown-model"


class ModelNotReady(ModelError):
    """A registered model's files are missing or differ from the digests its manifest pins."""

    code = "model-not-ready"


class PinMismatch(ModelNotReady):
    """A pinned file no longer matches its pin: resized, its BLAKE3 digest differs, or it
    resolves outside the model root. That is tampering, not absence: a spawn refused with it
    holds the instance down (stop reason ``tampered``) until the model is re-registered or
    the instance reloaded, and it is never counted as a crash.

    Attributes:
        model: the registry name of the model.
        shard: the pinned file's path relative to the model root.
        why: what the check found, starting with the file's label (``"shard x.gguf: ..."``).
    """

    code = "pin-mismatch"

    def __init__(self, message: str, model: str = "", shard: str = "", why: str = "") -> None:
        super().__init__(message)
        self.model = model
        self.shard = shard
        self.why = why


class RefusalKind(enum.StrEnum):
    """Why the front door refused a request: the client's HTTP status and whether a retry
    can help are set by the kind (`FrontDoorRefused.status`)."""

    UNKNOWN_MODEL = "unknown-model"
    """No instance serves that name (404; the message names the models that exist)."""
    QUEUE_FULL = "queue-full"
    """The global or the model's queue is at its depth (503, Retry-After)."""
    WAIT_TIMEOUT = "wait-timeout"
    """The request waited its maximum and was not granted (503, Retry-After)."""
    CONCURRENCY_LIMIT = "concurrency-limit"
    """The model's concurrency limit is reached (429, Retry-After)."""
    NEVER_FITS = "never-fits"
    """The model can never fit the memory budget (not retryable: names the need, the budget
    and what blocks)."""
    MEMORY_NOT_RECOVERED = "memory-not-recovered"
    """After an eviction the machine's free memory did not cover the need in time (503,
    Retry-After)."""
    START_FAILED = "start-failed"
    """The instance could not be started or gave up (the diagnosis in the server's own
    words); 503 with Retry-After when its supervisor will try again, else 502."""
    STOPPING = "stopping"
    """The instance is being stopped (an operator, a reload) or the front door is shutting
    down while the request waited (503, Retry-After)."""


class FrontDoorRefused(InferactorsError):
    """The front door cannot serve this request now (or ever: ``retry_after_s`` is None).

    Attributes:
        kind: why (`RefusalKind`).
        status: the HTTP status the client gets.
        retry_after_s: seconds after which a retry may succeed (``Retry-After``), None when
            a retry cannot help.
        model: the name the request asked for.
    """

    code = "front-door-refused"

    def __init__(
        self,
        message: str,
        *,
        kind: RefusalKind,
        status: int,
        model: str,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.model = model
        self.retry_after_s = retry_after_s


class BadRequest(InferactorsError):
    """A client's request to the front door is malformed: its body is not JSON, too large,
    too slow to arrive or of the wrong type, or a field is missing or of the wrong type.
    The message names the field (``$.model: expected a string, got 42``).

    Attributes:
        status: the HTTP status the client gets (400, 408, 411, 413 or 415).
    """

    code = "bad-request"

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


SHOWN_CHARS = 200
"""How much of a value from input an error message echoes (`shown`)."""


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters with the
    original length: ``'aaaa...'... (52428800 characters)``. Input can be megabytes long;
    a message that echoes it must stay one short line."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return f"{text[:limit]}... ({len(text)} characters)" if len(text) > limit else text


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` unchanged when short, else its first ``limit`` characters and its length:
    ``aaaa... (52428800 characters)`` (for messages that quote input their own way)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def one_line(message: str, limit: int = 1000) -> str:
    """``message`` as one printable line of at most about ``limit`` characters (newlines
    shown as ``\\n``, every other control or formatting character escaped as `printable`
    does, the rest cut with its length said), for a command's error line."""
    text = printable(message)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... (message cut: {len(text)} characters)"


_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on rather than show written as
    its escape: control characters (ESC ``\\x1b``, ``\\r``, ``\\n``, ``\\t``, C1
    controls) and the invisible or direction-changing format characters (``\\u202e``).
    For any text from a file, a signature, a store or a server that reaches a terminal or
    a log line (a terminal escape sequence in a certificate subject could clear the screen
    and print a fake result)."""
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"
