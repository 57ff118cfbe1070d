"""The web page says what the CLI prints: `CliWords`, the page's words (``_service/ui_app.py``
`PageWords`) made of the CLI's own formatting, passed to the page by ``inferactors run``."""

from __future__ import annotations

from typing import Any

import attrs

from .._errors import one_line
from .._events import Event
from .control_format import reload_words, state_words
from .event_words import describe_event


@attrs.frozen
class CliWords:
    """Each result as ``inferactors start|stop|restart|reload`` prints it, a refusal as
    the line it prints on stderr, and an event as ``inferactors events`` prints it."""

    def instance(self, verb: str, view: dict[str, Any]) -> str:
        """``chat: running, pid 4242``."""
        return f"{view['name']}: {state_words(view)}"

    def reload(self, result: dict[str, Any]) -> str:
        """``changed: chat`` and ``unchanged: embed``, or ``nothing changed (...)``."""
        return reload_words(result)

    def failed(self, verb: str, code: str, message: str) -> str:
        """``inferactors stop: chat is not running``."""
        if verb == "reload" and code == "invalid-config":
            message = f"the run file is invalid; nothing changed: {message}"
        return one_line(f"inferactors {verb}: {message}")

    def event(self, event: Event, name: str | None = None) -> str:
        """``chat  process 4242 exited with status 1 (reason: crash)``, naming the instance
        by ``name`` (its role; its id when None), and below it the server's own last lines
        when it failed."""
        return describe_event(event, name)
