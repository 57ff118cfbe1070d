"""How the web page says results and events: `PageWords`, and `JsonWords`, its default
(``inferactors run`` passes the CLI's own words: ``_cli/ui_words.py``)."""

from __future__ import annotations

import json
from typing import Any, Protocol

import attrs

from .._config.convert_api import event_data
from .._events import Event


class PageWords(Protocol):
    """How results and events are said on the page: as the CLI prints them (``inferactors
    run`` passes the CLI's own words)."""

    def instance(self, verb: str, view: dict[str, Any]) -> str:
        """What ``inferactors start|stop|restart`` prints of the view after ``verb``."""

    def reload(self, result: dict[str, Any]) -> str:
        """What ``inferactors reload`` prints of a reload's result."""

    def failed(self, verb: str, code: str, message: str) -> str:
        """What ``inferactors <verb>`` prints when the supervisor refused the command."""

    def event(self, event: Event, name: str | None = None) -> str:
        """One line (or more) for an event, as ``inferactors events`` prints it, naming its
        instance by ``name`` (its role; its id when None)."""


@attrs.frozen
class JsonWords:
    """`PageWords` as ``--json`` prints results; an event as its type and JSON."""

    def instance(self, verb: str, view: dict[str, Any]) -> str:
        return json.dumps(view, indent=2)

    def reload(self, result: dict[str, Any]) -> str:
        return json.dumps(result, indent=2)

    def failed(self, verb: str, code: str, message: str) -> str:
        return f"inferactors {verb}: {message}"

    def event(self, event: Event, name: str | None = None) -> str:
        return json.dumps(event_data(event))
