"""The Ollama API client: list, load, unload and watch models through Ollama's HTTP API.

Two layers:

- pure helpers: `keep_alive_json`, `same_tag`, `load_body`, `check_load_reply`,
  `parse_tags`, `parse_ps`, `parse_expiry` and `ExpiryWatch`; no I/O; they live in
  `ollama_parse.py`;
- `OllamaClient`, the I/O edge (this module), on two `ProbeClient` s (one for ordinary
  requests, one with the long load timeout), so it shares their httpx settings, identity
  encoding (any other refused unread), 1 MiB body cap, failure mapping and replies read by
  the one safe JSON parser (`inferactors._safe_json`). The runtime sees it through the
  `OllamaApi` protocol.

Deadlines: each method makes one request under one deadline (``timeout_s``, the load
``load_timeout_s``), except `OllamaClient.wait_gone`, whose polls all share ``deadline_s``.

It only ever uses ``GET /api/version``, ``GET /api/tags``, ``GET /api/ps``,
``POST /api/generate`` and ``POST /v1/chat/completions``: never ``/api/pull``,
``/api/delete`` or an HTTP DELETE, and it never starts or stops Ollama.

Errors::

    BackendError (inferactors._errors)
    ├── ProbeFailure        (inferactors._edges.probe) no usable reply: refused, reset,
    │                       timeout, > 1 MiB, compressed
    └── OllamaLoadTimeout   (inferactors._policy.ollama_parse) a load did not finish: the
                            runner timed out or our load request ran out of
                            ``load_timeout_s``
                            (also TimeoutError)
"""

from __future__ import annotations

from typing import Protocol, Self

import attrs
import httpx
import trio

from .._errors import BackendError
from .._policy.ollama_parse import (
    LoadedModel,
    OllamaLoadTimeout,
    OllamaModel,
    check_load_reply,
    json_object,
    load_body,
    parse_ps,
    parse_tags,
    same_tag,
    snippet,
    unload_body,
)
from .._policy.probe_report import CompletionResult
from .probe import ProbeClient, ProbeFailure


class OllamaApi(Protocol):
    """What the runtime needs from Ollama; `OllamaClient` is the HTTP implementation."""

    async def version(self) -> str: ...
    async def tags(self) -> tuple[OllamaModel, ...]: ...
    async def ps(self) -> tuple[LoadedModel, ...]: ...
    async def resident(self, tag: str) -> LoadedModel | None: ...
    async def load(self, tag: str, keep_alive: str | int) -> None: ...
    async def unload(self, tag: str) -> None: ...
    async def wait_gone(self, tag: str, *, deadline_s: float, interval_s: float = 0.1) -> bool: ...
    async def tiny_completion(self, tag: str) -> CompletionResult: ...
    async def aclose(self) -> None: ...


@attrs.define(eq=False)
class OllamaClient:
    """HTTP client for one Ollama daemon; open it with `OllamaClient.open`.

    Same httpx settings as `ProbeClient` (no redirects, proxy variables ignored, one idle
    connection kept for GETs, identity encoding only, at most 1 MiB of a body). Every method but
    `wait_gone` is one request under one deadline of ``timeout_s`` float seconds (the load:
    ``load_timeout_s``). Usable as ``async with``.
    """

    base_url: str
    timeout_s: float
    load_timeout_s: float
    _api: ProbeClient
    _loader: ProbeClient

    @classmethod
    def open(
        cls,
        base_url: str,
        *,
        timeout_s: float,
        load_timeout_s: float = 900.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> OllamaClient:
        """A client for ``base_url`` (for example ``http://127.0.0.1:11434``).

        Args:
            base_url: the daemon's root URL.
            timeout_s: float seconds bounding each call but the load, body included.
            load_timeout_s: float seconds the load request may stay open; at least the
                model's load budget, since closing it aborts the load.
            transport: an httpx transport instead of the network (``httpx.MockTransport``).
        """
        api = ProbeClient.open(base_url, timeout_s=timeout_s, transport=transport)
        loader = ProbeClient.open(base_url, timeout_s=load_timeout_s, transport=transport)
        return cls(base_url, timeout_s, load_timeout_s, api, loader)

    async def aclose(self) -> None:
        """Close both underlying httpx clients."""
        await self._api.aclose()
        await self._loader.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def version(self) -> str:
        """``GET /api/version`` -> ``version`` (``"0.5.1"``), within ``timeout_s``.

        Raises:
            ProbeFailure: no usable reply. BackendError: non-200, or no ``version`` string.
        """
        document = json_object(await self._get_ok("/api/version"), "/api/version")
        version = document.get("version")
        if not isinstance(version, str):
            raise BackendError("ollama GET /api/version: reply has no version string")
        return version

    async def tags(self) -> tuple[OllamaModel, ...]:
        """``GET /api/tags``: the pulled models, within ``timeout_s`` (see `parse_tags` for
        errors; no usable reply is `ProbeFailure`)."""
        return parse_tags(await self._get_ok("/api/tags"))

    async def ps(self) -> tuple[LoadedModel, ...]:
        """``GET /api/ps``: the resident models, within ``timeout_s`` (see `parse_ps` for
        errors; no usable reply is `ProbeFailure`)."""
        return parse_ps(await self._get_ok("/api/ps"))

    async def resident(self, tag: str) -> LoadedModel | None:
        """The ``/api/ps`` entry whose ``name`` or ``model`` is ``tag`` (`same_tag`), or None;
        one request, within ``timeout_s``.

        Unlike the original (which read any error as "not resident"), errors propagate, so a
        caller never mistakes an unreadable ``/api/ps`` for a free model.

        Raises:
            ProbeFailure, BackendError: as `ps`.
        """
        return _find(await self.ps(), tag)

    async def load(self, tag: str, keep_alive: str | int) -> None:
        """Load ``tag``: ``POST /api/generate`` with `load_body`; returns once Ollama answers,
        which is after the load finished. The request stays open up to ``load_timeout_s``,
        since Ollama aborts a load whose client disconnects. Callers should confirm
        the result with `resident`.

        Raises:
            OllamaLoadTimeout: runner timeout or no reply within ``load_timeout_s``.
            BackendError: any other non-200 reply (see `check_load_reply`).
            ProbeFailure: no HTTP reply at all (the daemon is unreachable).
        """
        try:
            status, body = await self._loader.post_json("/api/generate", load_body(tag, keep_alive))
        except ProbeFailure as exc:
            if exc.kind != "timeout":
                raise
            why = f"ollama load of {tag} did not finish within {self.load_timeout_s:g} s"
            raise OllamaLoadTimeout(why) from exc
        check_load_reply(status, body)

    async def unload(self, tag: str) -> None:
        """Ask Ollama to unload ``tag``: ``POST /api/generate {"model": tag, "keep_alive": 0}``,
        within ``timeout_s``. Ollama answers at once; the model may stay in ``/api/ps`` a
        while (use `wait_gone`).

        Raises:
            ProbeFailure: no usable reply.
            BackendError: ``"ollama unload returned HTTP c: <first 200 chars>"`` for non-200.
        """
        status, body = await self._api.post_json("/api/generate", unload_body(tag))
        if status != 200:
            raise BackendError(f"ollama unload returned HTTP {status}: {snippet(body)}")

    async def wait_gone(self, tag: str, *, deadline_s: float, interval_s: float = 0.1) -> bool:
        """Poll ``/api/ps`` every ``interval_s`` float seconds until ``tag`` is not listed;
        give up after ``deadline_s`` float seconds (trio time, from now). The
        deadline bounds the whole call, polls in flight included.

        A failed poll counts as "still listed", so an unreachable daemon never reads as gone.

        Returns:
            True once a poll shows the model gone; False if it was still listed (or unknown)
            when the deadline passed.
        """
        with trio.move_on_after(deadline_s):
            while True:
                try:
                    if await self.resident(tag) is None:
                        return True
                except BackendError:
                    pass  # unknown this time: poll again until the deadline
                await trio.sleep(interval_s)
        return False

    async def tiny_completion(self, tag: str) -> CompletionResult:
        """One token through ``POST /v1/chat/completions`` with ``model`` = the Ollama tag
        (not the registry name, the original's bug) and no
        keep_alive field, so the model's keep_alive and our ownership stay unchanged. One
        request, within ``timeout_s``.

        Raises:
            DeepHealthTimeout, BackendError: as `ProbeClient.tiny_completion`.
        """
        return await self._api.tiny_completion(tag)

    async def _get_ok(self, path: str) -> bytes:
        status, body = await self._api.get(path)
        if status != 200:
            raise BackendError(f"ollama GET {path} returned HTTP {status}: {snippet(body)}")
        return body


def _find(models: tuple[LoadedModel, ...], tag: str) -> LoadedModel | None:
    for loaded in models:
        if same_tag(tag, loaded.name) or same_tag(tag, loaded.model):
            return loaded
    return None
