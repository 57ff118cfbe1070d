"""The Ollama actor's workers: every request a managed Ollama instance makes.

Each worker runs as a task in the actor's nursery, opens its own `OllamaApi` client through
the actor's `OllamaOpener`, and posts what it found back to the actor's inbox as one of the
messages of ``messages.py``; only the actor's rules (``step.py``) change state. Workers that
change nothing (health, deep health) answer their caller directly.

The requests are only ``GET /api/version``, ``GET /api/tags``, ``GET /api/ps``, ``POST
/api/generate`` (load, unload) and ``POST /v1/chat/completions`` (deep health): never
``/api/pull``, ``/api/delete`` or an HTTP DELETE, and nothing ever starts or stops the
daemon.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import attrs
import trio

from ..._edges.loop_lag import no_verdict
from ..._edges.ollama_client import OllamaApi, OllamaClient
from ..._edges.probe import ProbeFailure, failure_health
from ..._errors import BackendError, DeepHealthTimeout, InferactorsError
from ..._policy.ollama_parse import LoadedModel, OllamaModel, same_tag
from ..._policy.probe_report import CompletionResult, ServerReport, Unhealthy, Unreachable, Up
from ..._status import InstanceStatus
from ..mailbox import post
from ..messages import ReplyTo, answer, refuse
from .messages import (
    Checked,
    Closed,
    Loaded,
    LoadTicket,
    OllamaInternal,
    Survey,
    Surveyed,
    Unloaded,
    Watched,
)
from .step import SHUTDOWN_GONE_S

OllamaOpener = Callable[[str, float, float], OllamaApi]
"""``open(base_url, timeout_s, load_timeout_s)``: a client for one Ollama daemon (the HTTP
edge of the Ollama actor; tests pass one built on ``FakeOllama.transport``)."""

START_LINGER_WAIT_S = 10.0
"""How long a start waits for our own earlier unload to leave ``/api/ps``."""

CLOSE_S = 1.0
"""Bound on closing a client (shielded, so a cancelled worker still closes it)."""


def open_ollama_client(base_url: str, timeout_s: float, load_timeout_s: float) -> OllamaApi:
    """The real `OllamaOpener`: an `OllamaClient` over the network."""
    return OllamaClient.open(base_url, timeout_s=timeout_s, load_timeout_s=load_timeout_s)


def cloud_host(pulled: tuple[OllamaModel, ...], tag: str) -> str | None:
    """The remote host of ``tag`` when ``/api/tags`` lists it as a cloud model, else None."""
    for model in pulled:
        if model.cloud and (same_tag(tag, model.name) or same_tag(tag, model.model)):
            return model.remote_host
    return None


async def survey(api: OllamaApi, timeout_s: float) -> Survey:
    """Look at the daemon with GETs only: ``/api/version``, ``/api/tags``, ``/api/ps``, all
    three within ONE deadline of ``timeout_s`` float seconds from the call.

    Never raises for a daemon fault: no reply is Unreachable, a bad version reply Unhealthy,
    and an unreadable list, or one the deadline cut off, is None (unknown, not "empty"). A
    ``/api/version`` whose deadline our own late loop ate gives no verdict
    (`Survey.no_verdict`; ``_edges/loop_lag.py``).
    """
    found = Survey(Unreachable(f"GET /api/version: no complete reply within {timeout_s:g} s"))
    started = trio.current_time()
    with trio.move_on_at(started + timeout_s) as scope:
        try:
            version = await api.version()
        except ProbeFailure as failure:
            return Survey(failure_health(failure))
        except BackendError as error:
            return Survey(Unhealthy(str(error)))
        found = Survey(Up(), version=version)
        try:
            found = attrs.evolve(found, pulled=tuple(model.name for model in await api.tags()))
        except BackendError:
            pass  # unknown: the status does not claim "not pulled" from an unreadable list
        found = attrs.evolve(found, resident=await _ps_or_none(api))
    if scope.cancelled_caught and not isinstance(found.health, Up):
        late = no_verdict("GET /api/version", started, started + timeout_s)
        if late is not None:
            return Survey(Unreachable(late, overloaded=True))
    return found


async def _ps_or_none(api: OllamaApi) -> tuple[LoadedModel, ...] | None:
    try:
        return await api.ps()
    except BackendError:
        return None


@asynccontextmanager
async def _opened(api: OllamaApi) -> AsyncIterator[OllamaApi]:
    try:
        yield api
    finally:
        with trio.move_on_after(CLOSE_S, shield=True):
            await api.aclose()


@attrs.frozen
class OllamaWork:
    """The I/O of one managed Ollama instance.

    Attributes:
        base_url: the daemon's root URL.
        tag: the model's Ollama tag.
        keep_alive: what the load sends (`inferactors._policy.ollama_parse.keep_alive_json`
            decides the JSON type).
        probe_timeout_s: float seconds for each ordinary request.
        load_timeout_s: float seconds the load request may stay open.
        deep_timeout_s: float seconds for the deep-health completion.
        watch_interval_s: float seconds between the ownership watch's ``/api/ps`` looks.
        open_api: the HTTP edge.
        post: the actor's inbox.
        wall_clock: the calendar time now (aware), compared with ``/api/ps``'s
            ``expires_at`` (the system's UTC clock by default).
    """

    base_url: str
    tag: str
    keep_alive: str | int
    probe_timeout_s: float
    load_timeout_s: float
    deep_timeout_s: float
    watch_interval_s: float
    open_api: OllamaOpener
    post: trio.MemorySendChannel[object]
    wall_clock: Callable[[], datetime] = attrs.field(default=lambda: datetime.now(UTC))

    def _client(self, timeout_s: float | None = None) -> AbstractAsyncContextManager[OllamaApi]:
        api = self.open_api(self.base_url, timeout_s or self.probe_timeout_s, self.load_timeout_s)
        return _opened(api)

    async def _post(self, message: OllamaInternal) -> None:
        await post(self.post, message)

    # Start: read /api/ps, then (if the actor says so) load.

    async def check(self, attempt: int, lingering: bool) -> None:
        """Is the model a cloud model (never loaded by us), or resident before we load it?
        If our own earlier unload was still lingering, wait up to
        `START_LINGER_WAIT_S` for it to go first."""
        async with self._client() as api:
            try:
                cloud = cloud_host(await api.tags(), self.tag)
                if cloud is not None:
                    await self._post(Checked(attempt, None, cloud=cloud))
                    return
                entry = await api.resident(self.tag)
                if entry is not None and lingering:
                    gone = await api.wait_gone(self.tag, deadline_s=START_LINGER_WAIT_S)
                    entry = None if gone else entry
            except BackendError as error:
                await self._post(Checked(attempt, None, error))
                return
        await self._post(Checked(attempt, entry))

    async def load(self, attempt: int, scope: trio.CancelScope, ticket: LoadTicket) -> None:
        """Load the model with our keep_alive and confirm it in ``/api/ps``.

        The request stays open up to ``load_timeout_s``; cancelling ``scope`` (a stop) closes
        it, which makes Ollama abort the load. A failure is posted as it is, never retried.
        ``ticket`` is marked the moment Ollama answers 200.
        """
        with scope:
            async with self._client() as api:
                try:
                    await api.load(self.tag, self.keep_alive)
                    ticket.answered = True  # no checkpoint since the reply: it is ours
                    entry = await api.resident(self.tag)
                except InferactorsError as error:
                    await self._post(Loaded(attempt, None, error))
                    return
            await self._post(Loaded(attempt, entry))

    async def watch(self, attempt: int, scope: trio.CancelScope) -> None:
        """Every ``watch_interval_s``, read ``/api/ps`` and post it (timed, with the calendar
        time of the look from ``wall_clock``), until ``scope`` ends."""
        with scope:
            while True:
                await trio.sleep(self.watch_interval_s)
                async with self._client() as api:
                    started = trio.current_time()
                    resident = await _ps_or_none(api)
                    latency_s = trio.current_time() - started
                await self._post(Watched(attempt, resident, latency_s, self.wall_clock()))

    # Stop and unload.

    async def unload(self, deadline_s: float) -> None:
        """Send the one unload (keep_alive 0), then poll ``/api/ps`` until the model is gone
        or ``deadline_s`` float seconds pass. The unload is never re-sent."""
        async with self._client() as api:
            try:
                await api.unload(self.tag)
            except BackendError as error:
                await self._post(Unloaded(False, deadline_s, error))
                return
            gone = await api.wait_gone(self.tag, deadline_s=deadline_s)
        await self._post(Unloaded(gone, deadline_s))

    async def close(self, owed: bool, instance_dir: Path | None, reply: ReplyTo[None]) -> None:
        """The instance is unloaded: send the unload we owe (best effort), remove the
        instance directory, and end the actor."""
        if owed:
            async with self._client() as api:
                try:
                    await api.unload(self.tag)
                    await api.wait_gone(self.tag, deadline_s=SHUTDOWN_GONE_S)
                except BackendError:
                    pass  # best effort: the instance is being forgotten either way
        if instance_dir is not None:
            await trio.to_thread.run_sync(shutil.rmtree, instance_dir, True)  # errors ignored
        await self._post(Closed(reply))

    async def unload_now(self) -> None:
        """The emergency unload of a torn-down actor: one request, no polling."""
        async with self._client() as api:
            try:
                await api.unload(self.tag)
            except BackendError:
                pass  # nothing more can be done from a dying actor

    # Status and health.

    async def survey_for(self, reply: ReplyTo[InstanceStatus] | None) -> None:
        """Survey the daemon and post it, for a status request (GETs only)."""
        async with self._client() as api:
            found = await survey(api, self.probe_timeout_s)
        await self._post(Surveyed(found, reply))

    async def health(self, reply: ReplyTo[ServerReport]) -> None:
        """Answer one report of the daemon, within ``probe_timeout_s`` in all (`survey`)."""
        async with self._client() as api:
            found = await survey(api, self.probe_timeout_s)
        answer(reply, found.report())

    async def _one_token(self, api: OllamaApi) -> CompletionResult:
        with trio.move_on_after(self.deep_timeout_s):
            if await api.resident(self.tag) is None:
                raise BackendError(
                    f"deep health: model {self.tag} is not resident in ollama; start the "
                    "instance first (a completion would load it outside inferactors)"
                )
            return await api.tiny_completion(self.tag)
        raise DeepHealthTimeout(f"deep health: no complete answer within {self.deep_timeout_s:g} s")

    async def deep_health(self, reply: ReplyTo[CompletionResult]) -> None:
        """One real token, asked by the model's TAG (the original asked by registry name, a
        bug), with ONE deadline of ``deep_timeout_s`` for the
        residency check and the completion together (`DeepHealthTimeout` when it passes).

        Refused with `BackendError` when the model is not resident: a completion would make
        Ollama load it with its default keep_alive, outside our ownership.
        """
        async with self._client(self.deep_timeout_s) as api:
            try:
                result = await self._one_token(api)
            except ProbeFailure as failure:
                refuse(reply, BackendError(f"deep health: {failure.why}"))
                return
            except InferactorsError as error:
                refuse(reply, error)
                return
        answer(reply, result)
