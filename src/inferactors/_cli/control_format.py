"""How the control commands print a running supervisor's answers: the status table (and
its residency cells), an instance's state in words, log lines and event lines (their
control characters made harmless) and what a reload did. Pure text from the control API's
JSON (``docs/control-api.md``); split from ``control``, whose commands print through it
(the web page's words, ``ui_words.py``, share it).
"""

from __future__ import annotations

import datetime
import json
import typing
from collections.abc import Iterable
from typing import Any

from .._edges.line_marks import CONTINUED
from .._errors import one_line
from .._policy.sizes import size_text
from .terminal import STATE_COLOURS, table


def status_table(
    views: Iterable[dict[str, Any]], *, width: int | None = None, colour: bool = False
) -> str:
    """The instances as a table: NAME, MODE, STATE (the display state), ENDPOINT, MODEL,
    PID, UPTIME, RESTARTS, DETAIL; when the scheduler runs, also RESIDENCY, MEMORY
    (declared/estimated/measured), REQS (in flight+queued) and TTL (idle time left) before
    DETAIL. ``width``: cut DETAIL to it (a terminal's); ``colour``: colour the states."""
    views = list(views)
    scheduled = any(view.get("residency") for view in views)
    header: tuple[str, ...] = (
        "NAME", "MODE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "RESTARTS", "DETAIL"
    )  # fmt: skip
    if scheduled:
        header = (*header[:-1], "RESIDENCY", "MEMORY", "REQS", "TTL", "DETAIL")
    rows = [header] + [_cells(view, scheduled) for view in views]
    return table(rows, width=width, paint=_state_colour if colour else None)


def _state_colour(column: int, cell: str) -> str | None:
    return STATE_COLOURS.get(cell) if column == 2 else None


def shown_state(view: dict[str, Any]) -> str:
    """The view's display state (a supervisor before them: its status's state)."""
    return str(view.get("display_state") or view["status"]["state"])


def _cells(view: dict[str, Any], scheduled: bool = False) -> tuple[str, ...]:
    status = view["status"]
    pid = status.get("pid")
    cells: tuple[str, ...] = (
        view["name"],
        view["mode"],
        shown_state(view),
        _address(view.get("endpoint")),
        view.get("model") or "-",
        "-" if pid is None else str(pid),
        duration(status.get("uptime_s")),
        str(status.get("restarts", 0)),
    )
    if scheduled:
        cells += residency_cells(view.get("residency"))
    return (*cells, _detail(view))


def _address(endpoint: str | None) -> str:
    """``127.0.0.1:8090`` of ``http://127.0.0.1:8090``; ``-`` for none."""
    if not endpoint:
        return "-"
    return endpoint.split("://", 1)[-1]


def residency_cells(residency: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """RESIDENCY, MEMORY, REQS, TTL of a view's ``residency`` (dashes when None):
    ``resident``, ``0.5 MB/17.3 MB/18.1 MB``, ``1+2``, ``4m59s``."""
    if not residency:
        return ("-", "-", "-", "-")
    measured = residency.get("measured_bytes")
    memory = "/".join(
        "-" if value is None else size_text(int(value))
        for value in (residency["declared_bytes"], residency["estimated_bytes"], measured)
    )
    ttl = residency.get("ttl_left_s")
    return (
        str(residency["residency"]),
        memory,
        f"{residency['in_flight']}+{residency['queued']}",
        "-" if ttl is None else duration(float(ttl)),
    )


def _detail(view: dict[str, Any]) -> str:
    if view.get("refused"):
        return f"refused: {view['refused']}"
    status = view["status"]
    words = [status.get("detail")]
    if status["state"] == "exited" and status.get("stop_reason"):
        words.append(f"reason: {status['stop_reason']}")
    words.append(status.get("supervision"))
    deadline = view.get("stop_deadline_at")
    if deadline is not None:
        words.append(f"stopping: killed at {_local_time(deadline)} if still running")
    return one_line("; ".join(word for word in words if word), 200)


def duration(seconds: float | None) -> str:
    """``-``, ``42s``, ``3m05s`` or ``2h07m``."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def state_words(view: dict[str, Any]) -> str:
    status = view["status"]
    words = shown_state(view)
    if status.get("pid") is not None:
        words += f", pid {status['pid']}"
    detail = _detail(view)
    return f"{words} ({detail})" if detail else words


_HARMLESS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if code != 0x09}
"""Control characters (C0 but tab, DEL, C1) as visible ``\\xNN`` escapes."""


def harmless(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` (an event's own line
    breaks) shown as ``\\x1b`` instead of sent to the terminal: a server's output must not
    set the window title, clear the screen, move the cursor over earlier lines or forge a
    line of its own (``\\r``)."""
    return (
        keep.join(part.translate(_HARMLESS) for part in text.split(keep))
        if keep
        else text.translate(_HARMLESS)
    )


def log_line(line: dict[str, Any]) -> str:
    """``2025-06-01T12:00:00.123 stderr 4242  <text>``: local time, stream, pid, text (its
    control characters made harmless: `harmless`), and ``[continues]`` after a piece of a
    line longer than the line cap."""
    at = _local_time(line["at"])
    mark = CONTINUED if line.get("continued") else ""
    return f"{at} {line['stream']} {line['pid']}  {harmless(str(line['text']))}{mark}"


def event_line(item: dict[str, Any]) -> str:
    """An event as the supervisor prints it, after its wall-clock time (local, ISO 8601
    with milliseconds) and naming its instance by name (its role); or its JSON when this
    CLI does not know it. (Only ``events`` needs the event classes and the converter:
    imported here.)"""
    from .._config.convert_hooks import converter
    from .._events import Event
    from .event_words import describe_event

    types = {cl.__name__: cl for cl in typing.get_args(Event)}
    fields = {key: value for key, value in item.items() if key not in ("type", "name")}
    cl = types.get(str(item.get("type")))
    event: Event | None = None
    try:
        event = converter.structure(fields, cl) if cl is not None else None
    except Exception:  # a newer supervisor's fields: show what came
        pass
    if event is None:
        return json.dumps(item)
    wall = item.get("wall_time")
    return f"{_local_time(wall)} {describe_event(event, item.get('name'))}"


def _local_time(unix_s: object) -> str:
    """``2025-06-01T12:00:00.123`` (local time), ``-`` for none (an older supervisor)."""
    if not isinstance(unix_s, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(float(unix_s)).isoformat(timespec="milliseconds")


def reload_words(result: dict[str, Any]) -> str:
    """What a reload did, one line per kind of change (``nothing changed`` when none),
    then one ``refused NAME: reason`` line per instance refused at its load or start, and
    one ``held down as tampered NAME: reason`` line per unchanged instance whose model the
    re-read trust anchors no longer verify; an ``applied [TABLE] live`` line per table
    whose new values were applied (``[residency]``), so a changed budget never reads as
    ``nothing changed``."""
    kinds = ("added", "removed", "changed", "revived")
    lines = [f"{kind}: {', '.join(result[kind])}" for kind in kinds if result.get(kind)]
    refused = [one_line(f"refused {name}: {why}", 300) for name, why in refused_of(result)]
    refused += [
        one_line(f"held down as tampered {name}: {why}", 300)
        for name, why in refused_of({"refused": result.get("tampered")})
    ]
    applied = [f"applied [{table}] live" for table in result.get("applied") or ()]
    if not lines:
        count = len(result.get("unchanged", []))
        done = f"nothing changed ({count} instance(s) unchanged)"
        if applied:
            done = f"no instance changed ({count} unchanged)"
        return "\n".join([done, *applied, *refused])
    unchanged = result.get("unchanged", [])
    return "\n".join([*lines, f"unchanged: {', '.join(unchanged) or 'none'}", *applied, *refused])


def refused_of(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(name, reason)`` of each instance a reload's ``refused`` names: an object by
    name, or a list of pairs."""
    refused = result.get("refused") or {}
    pairs = refused.items() if isinstance(refused, dict) else refused
    return sorted((str(name), str(why)) for name, why in pairs)
