"""Which paths ``inferactors ui`` forwards to the supervisor: an allow-list, checked on the
path exactly as the client sent it, before any routing decision (`forwarded_path`).

A path is made of ``/``-separated segments, each percent-decoded on its own. It is refused
(None) when any segment is empty (``//``), a dot segment (``.``, ``..``, also written
``%2e%2e``), holds a ``/`` or ``\\`` once decoded (``%2f``, ``%5c``), a ``%`` once decoded
(double encoding), a control character, or is not valid UTF-8; a ``\\`` anywhere refuses it
too. What is left must be one of the page's own paths: the page (``/ui``, ``/ui/``), its
assets, its stream, one instance's view, log stream and commands, and the reload. The path
sent on is rebuilt from the decoded segments (each one percent-encoded again), so a client
library's own normalisation has nothing left to resolve.
"""

from __future__ import annotations

from urllib.parse import quote

from .control_access import plain_segments

_ASSETS = frozenset({"app.js", "app.css"})
"""The page's assets (``ui_app.ASSETS``: kept in step by a test)."""
_VERBS = frozenset({"logs", "start", "stop", "restart"})
"""What the page does under one instance's path."""


def _allowed(segments: list[str]) -> bool:
    """Whether decoded ``segments`` name one of the page's paths."""
    match segments:
        case ["ui"] | ["ui", ""] | ["ui", "api", "stream"] | ["ui", "api", "reload"]:
            return True
        case ["ui", "static", asset]:
            return asset in _ASSETS
        case ["ui", "api", "instances", name]:
            return name != ""
        case ["ui", "api", "instances", name, verb]:
            return name != "" and verb in _VERBS
    return False


def forwarded_path(raw_path: bytes) -> str | None:
    """The path to send on for ``raw_path`` (the request's path as sent, without its
    query), or None when it is not one of the page's paths or is written in a way that
    could name another one (module docstring)."""
    segments = plain_segments(raw_path)
    if segments is None or not _allowed(segments):
        return None
    return "/" + "/".join(quote(segment, safe="") for segment in segments)
