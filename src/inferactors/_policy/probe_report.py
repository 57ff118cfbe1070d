"""What a probe found: the health values (`Up`, `Busy`, `Loading`, `Unhealthy`,
`Unreachable`), one probe's `ServerReport` and a one-token `CompletionResult` (pure values;
no I/O). The parsing that makes them from a status code and a body is ``probe_parse.py``;
the HTTP edge that sends the requests is ``_edges/probe.py``. Durations are float seconds.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .._flavor import InferFlavor
from .matching import lists
from .router_models import RouterModel


@attrs.frozen
class Up:
    """The server answers and is ready to serve."""


@attrs.frozen
class Loading:
    """The server answers but is still loading its model (HTTP 503)."""


@attrs.frozen
class Busy:
    """The server answers and serves, but every slot is taken (llama-server's HTTP 503 "no
    slot available"); ``why`` is the server's words. Not loading, not unhealthy."""

    why: str


@attrs.frozen
class Unhealthy:
    """The server answers with a status that means neither ready nor loading; ``why`` says which.

    ``dead`` is True when the server itself says it can never serve again (mlx_lm.server's
    ``{"status": "unavailable"}``: its generation thread died), so no completion is sent
    to check whether completions still work.
    """

    why: str
    dead: bool = False


@attrs.frozen
class Unreachable:
    """No HTTP answer at all (refused, reset, timed out); ``why`` is the transport's message.

    ``overloaded``: the request (or a later one of the same probe, such as the model list)
    timed out only because our own event loop ran late (``_policy/lateness.py``): no
    verdict on the server (`ServerReport.no_verdict`).
    """

    why: str
    overloaded: bool = False


Health: TypeAlias = Up | Busy | Loading | Unhealthy | Unreachable


def serving(health: Health) -> bool:
    """Whether ``health`` says the server serves requests: `Up`, or `Busy` (all slots taken)."""
    return isinstance(health, Up | Busy)


@attrs.frozen
class ServerReport:
    """One probe of a server.

    Attributes:
        health: what the health request (and its fallback) said.
        models: ids the server lists (``/v1/models`` ``data[].id`` or Ollama ``/api/tags``);
            empty unless ``health`` is `Up`.
        loaded: models resident in memory (Ollama ``/api/ps``); empty for other flavors.
        version: the server's version (Ollama ``/api/version``); None for other flavors.
        latency_s: seconds the health request (with its ``/v1/models`` fallback) took.
        models_problem: why the model list could not be read (``"model list unreadable:
            ..."``, see `model_list_problem`), or None: read, possibly empty, or no list
            endpoint (404). A list nobody could read confirms no model.
        router: the per-model status entries of a llama-server in router mode
            (`router_models.RouterModel`); empty for a single-model server.
        refused: ``"HTTP 401: Invalid API Key"`` when a request was refused for want of a
            valid API key (401 or 403, with the server's words: `refusal`), else None.
        models_no_verdict: the no-verdict words of a model list that lost its deadline to
            our own late loop (``_policy/lateness.py``) after ``health`` answered, else
            None: the server's health is what it said, its list is unknown (not a
            "models problem"), and the report as a whole gives no verdict (`no_verdict`).
    """

    health: Health
    models: tuple[str, ...] = ()
    loaded: tuple[str, ...] = ()
    version: str | None = None
    latency_s: float = 0.0
    models_problem: str | None = None
    router: tuple[RouterModel, ...] = ()
    refused: str | None = None
    models_no_verdict: str | None = None

    @property
    def no_verdict(self) -> bool:
        """Whether this probe gives no verdict on the server: one of its requests lost its
        deadline to our own late loop (``_policy/lateness.py`` `no_verdict_report`)."""
        return self.no_verdict_why is not None

    @property
    def no_verdict_why(self) -> str | None:
        """The words of the request that gave no verdict (`no_verdict`), else None."""
        if isinstance(self.health, Unreachable) and self.health.overloaded:
            return self.health.why
        return self.models_no_verdict

    def lists(self, wanted: str, flavor: InferFlavor = InferFlavor.LLAMACPP) -> bool:
        """Whether ``models`` names ``wanted`` as ``flavor`` names models (exactly: see
        `inferactors._policy.matching.same_model`)."""
        return lists(self.models, wanted, flavor)

    def resident(self, wanted: str) -> bool:
        """Whether ``loaded`` (Ollama's) names ``wanted`` as Ollama names models (see
        `inferactors._policy.matching.same_model`)."""
        return lists(self.loaded, wanted, InferFlavor.OLLAMA)


@attrs.frozen
class CompletionResult:
    """A finished one-token completion: its ``text``, ``latency_s`` and ``finish_reason``."""

    text: str
    latency_s: float
    finish_reason: str | None
