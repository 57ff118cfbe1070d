"""The fake inference server's answers, pure: `decide` says what it does with one request
in its phase (loading, ready, dead), and `completion_fate` what a served completion meets
under the faults (``_fake_faults``' `FakeServerOptions`). The program that carries them out,
with its sockets, signals and files, is ``_fake_server``. No I/O here (the replies'
``created`` fields read the wall clock).

The answers follow the real servers' HTTP APIs (the shapes
were checked against the real llama-server here):

- flavor ``llamacpp`` (llama-server): ``GET /health`` 200 ``{"status":"ok"}``, or 503
  ``{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`` while
  loading, as is every other endpoint except ``/v1/models`` and ``/models``, which answer with
  ``meta`` null (FC-03); ``GET /props`` (``model_path``, ``model_alias``, ``total_slots``,
  ``build_info``); one-token completions on ``POST /v1/chat/completions``,
  ``/chat/completions``, ``/v1/completions``, ``/completion`` and ``/completions``, with
  ``finish_reason`` ``"length"`` (``stop_type`` ``"limit"`` on ``/completion``), streamed as
  server-sent events with ``"stream": true``; 400 for a chat whose ``messages`` is missing
  or not an array; ``GET /slots``, ``POST /tokenize`` and ``/detokenize``; 501 on
  ``/metrics`` and the embeddings endpoints (no ``--metrics``, ``--embeddings``); 404
  otherwise. CORS headers, preflights and ``HEAD`` are ``_fake_server``'s.
- flavor ``mlx`` (mlx_lm.server 0.32.2): ``GET /health`` 200 even while loading, 503
  ``{"status": "unavailable"}`` once the generator is dead; ``GET /v1/models`` lists
  ``--model`` (nothing once dead); completions on ``POST /v1/chat/completions``,
  ``/chat/completions`` and ``/v1/completions`` wait for the load, then answer one token
  (streamed with ``"stream": true``), or 400 for a chat whose ``messages`` is missing or not
  an array, or 404 ``{"error": ...}`` when the body has a ``"model"`` other than
  ``--model`` (FC-09; stricter than the real server, which also takes
  ``"default_model"``) or when the generator is dead (FC-07); 404 ``Not Found`` on any
  other path.
"""

from __future__ import annotations

import time
from typing import Literal, TypeAlias
from urllib.parse import urlsplit

import attrs

from . import _fake_replies as replies
from . import _fake_retry as retry
from ._fake_faults import FakeServerOptions, Flavor

Phase: TypeAlias = Literal["loading", "ready", "dead"]


@attrs.frozen
class Reply:
    """Answer ``status`` with ``document`` as JSON, or a plain ``Not Found`` when it is None;
    ``cut_after``: send that many bytes of the body, then close the connection."""

    status: int
    document: object
    cut_after: int | None = None


@attrs.frozen
class Complete:
    """A completion on ``path`` to serve under the completion faults (``stream``: as
    server-sent events)."""

    path: str
    stream: bool = False


@attrs.frozen
class Stream:
    """Answer 200 ``text/event-stream``: each event a JSON document or a text (``[DONE]``);
    ``cut_after``: close the connection after that many bytes of the body."""

    events: tuple[object, ...]
    cut_after: int | None = None


@attrs.frozen
class AwaitLoad:
    """An mlx completion that came during the load: wait for the load, then decide again."""


@attrs.frozen
class Hang:
    """Never answer (the connection stays open)."""


@attrs.frozen
class Reset:
    """Close the connection at once with a TCP reset, answering nothing."""


@attrs.frozen
class Die:
    """End the process: kill it with ``signal`` (a name), or exit with ``exit_code``."""

    signal: str | None
    exit_code: int = 1


Outcome: TypeAlias = Reply | Stream | Hang | Reset | Die

_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
_LLAMA_404 = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
_LLAMA_COMPLETIONS = frozenset(
    {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completion", "/completions"}
)
_MLX_COMPLETIONS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions"})
_OK = {"status": "ok"}
_NO_KEY = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
_PUBLIC = (("GET", "/health"), ("GET", "/v1/health"))


def decide(
    options: FakeServerOptions, phase: Phase, method: str, target: str, body: bytes
) -> Reply | Hang | Reset | Complete | AwaitLoad:
    """What the server does with one request while in ``phase``, before completion faults."""
    path = urlsplit(target).path
    if options.flavor == "mlx":
        return _decide_mlx(options, phase, (method, path), body)
    return _decide_llamacpp(options, phase, (method, path), body)


def completion_fate(
    options: FakeServerOptions, path: str, number: int, *, stream: bool = False
) -> Outcome:
    """What the ``number``-th served completion (counting from 1) meets under the faults;
    ``stream``: answered as server-sent events."""
    faults = options.faults
    if faults.crash_on_completion is not None and number >= faults.crash_at_completion:
        return Die(faults.crash_on_completion)
    if retry.resets(faults, number):
        return Reset()
    if (status := retry.fails_with(faults, number)) is not None:
        return Reply(status, retry.error_document(status))
    limit = faults.fail_completions_after
    if faults.hang_completions or (limit is not None and number > limit):
        return Hang()
    cut = retry.cut_after(faults, number, stream=stream)
    if stream:
        events = replies.completion_events(options.flavor, options.model_id, path, number)
        return Stream(tuple(events), cut)
    return Reply(200, replies.completion(options.flavor, options.model_id, path, number), cut)


def _decide_llamacpp(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> Reply | Hang | Reset | Complete:
    method, path = route
    if options.faults.require_api_key and route not in _PUBLIC:
        return Reply(401, _NO_KEY)  # the real server checks the key before anything else
    if route in (("GET", "/v1/models"), ("GET", "/models")):
        if options.faults.models_status is not None:
            return Reply(options.faults.models_status, replies.NO_LIST)
        listed = replies.llamacpp_models(options.model_id, loaded=phase != "loading")
        return Reply(200, replies.as_router(listed, options.faults.router_status))
    if phase == "loading":
        return Reply(503, _LOADING)
    if route in (("GET", "/health"), ("GET", "/v1/health")):
        return _health(options.faults.health_fault)
    if route == ("GET", "/props"):
        return Reply(200, replies.props(options.model_id, options.faults.impostor or options.model))
    if (other := replies.llamacpp_other(route, body)) is not None:
        return Reply(*other)
    if method == "POST" and path in _LLAMA_COMPLETIONS:
        return _completion("llamacpp", path, body)
    return Reply(404, _LLAMA_404)


def _completion(flavor: Flavor, path: str, body: bytes) -> Reply | Complete:
    """A completion to serve, or the 500/400 its body earns (not JSON, bad ``messages``)."""
    if (problem := replies.json_problem(body)) is not None:
        return Reply(*replies.bad_json(flavor, problem))
    chat = path in ("/v1/chat/completions", "/chat/completions")
    if chat and (refused := replies.chat_problem(flavor, body)) is not None:
        return Reply(*refused)
    return Complete(path, replies.wants_stream(body))


def _decide_mlx(
    options: FakeServerOptions, phase: Phase, route: tuple[str, str], body: bytes
) -> Reply | Complete | AwaitLoad:
    method, path = route
    if route == ("GET", "/health"):
        return Reply(503, {"status": "unavailable"}) if phase == "dead" else Reply(200, _OK)
    if route == ("GET", "/v1/models"):
        if options.faults.models_status is not None:
            return Reply(options.faults.models_status, replies.NO_LIST)
        served = options.faults.impostor or options.model
        entry = {"id": served, "object": "model", "created": int(time.time())}
        return Reply(200, {"object": "list", "data": [] if phase == "dead" else [entry]})
    if method != "POST" or path not in _MLX_COMPLETIONS:
        return Reply(404, None)
    checked = _completion("mlx", path, body)
    if isinstance(checked, Reply):
        return checked
    wanted = replies.model_field(body)
    if wanted is not None and wanted != options.model:
        return Reply(404, {"error": f"model {wanted!r} is not the served --model (FC-09)"})
    if phase == "dead":
        return Reply(404, {"error": "generation thread died"})
    return AwaitLoad() if phase == "loading" else checked


def _health(fault: str | None) -> Reply | Hang | Reset:
    """A loaded llama-server's ``/health`` under ``health_fault``."""
    match fault:
        case "hang":
            return Hang()
        case "reset":
            return Reset()
        case "500":
            return Reply(500, {"error": {"code": 500, "message": "boom", "type": "server_error"}})
        case "busy":  # builds from PR #5548 to PR #9056
            return Reply(
                503, {"status": "no slot available", "slots_idle": 0, "slots_processing": 4}
            )
    return Reply(200, _OK)
