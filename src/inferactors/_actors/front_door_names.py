"""Which model a request names, for the front door's HTTP side: `route` over the seam's
`ModelEntry` values (``_policy/model_routes.py`` holds the rule, shared with the scheduler).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._errors import FrontDoorRefused, RefusalKind
from .._policy.model_routes import model_list as model_names
from .._policy.model_routes import route, unknown_words
from .front_door_seam import ModelEntry


def find_model(entries: Sequence[ModelEntry], name: str) -> ModelEntry | None:
    """The entry ``name`` routes to (`route`), or None."""
    index = route(name, [(entry.name, entry.aliases) for entry in entries])
    return None if index is None else entries[index]


def model_list(entries: Iterable[ModelEntry]) -> str:
    """The names of ``entries`` for a message (`model_routes.model_list`)."""
    return model_names(entry.name for entry in entries)


def unknown_model(entries: Iterable[ModelEntry], name: str) -> FrontDoorRefused:
    """The 404 refusal of a request for ``name``, naming the models that exist."""
    message = unknown_words(name, (entry.name for entry in entries))
    return FrontDoorRefused(message, kind=RefusalKind.UNKNOWN_MODEL, status=404, model=name)
