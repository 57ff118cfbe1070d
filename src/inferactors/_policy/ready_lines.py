"""Which lines of a starting server's output say it may be ready now (pure; no I/O).

A server that starts prints a line when it listens and when its model is loaded; probing
the moment such a line is read, rather than at the next tick of the timed schedule, is what
makes readiness seen as it happens. Lines seen on the real servers:

* llama-server of llama-cpp-python 0.3.36 (the build tested here), on stderr::

      0.00.015.172 I srv  llama_server: model loaded
      0.00.015.203 I srv  llama_server: listening on http://127.0.0.1:18777

* upstream llama.cpp builds (issue texts, e.g. ggml-org/llama.cpp#10397)::

      main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 5
      main: model loaded
      main: server is listening on http://127.0.0.1:8080 - starting the main loop
      srv  update_slots: all slots are idle

* mlx_lm.server 0.32.2 on stderr (it loads its model at the first request)::

      2026-12-01 19:52:32,344 - INFO - Starting httpd at 127.0.0.1 on port 18778...

* the fake servers of ``inferactors.testing`` print the line of the server they imitate,
  and their own ``inferactors fake server (llamacpp) listening on http://...``.

A line only ever makes the monitor probe sooner: readiness itself is still what the probe
and the first token say, so a line that matches by accident costs one early probe.
"""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

from .startup_fault import LLAMA_PREFIX

ReadyLine: TypeAlias = Literal["listening", "loaded"]
"""What a line says: the server ``listening`` (its model may still load) or its model
``loaded`` (it should answer at once)."""

_LOADED = re.compile(
    r"^(?:srv\s+)?(?:llama_server|main): model loaded\s*$"
    r"|^(?:srv\s+)?update_slots: all slots are idle\s*$"
    r"|^(?:main|llama_server): server is listening on https?://\S+ - starting the main loop"
)
_LISTENING = re.compile(
    r"^(?:srv\s+)?(?:llama_server|main): (?:server is )?listening on https?://\S+\s*$"
    r"|^(?:srv\s+)?(?:llama_server|main): HTTP server is listening, hostname: "
    r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - INFO - Starting httpd at \S+ on port \d+"
    r"|^inferactors fake server \(\w+\) listening on https?://\S+ pid \d+\s*$"
)


def ready_line(line: str) -> ReadyLine | None:
    """What ``line`` (one output line, without its newline) says about readiness: `ReadyLine`,
    or None for every other line. llama.cpp's log prefix (``0.00.015.172 I ``) is dropped
    first; only the servers' own phrasing matches (see the module docstring)."""
    text = LLAMA_PREFIX.sub("", line.strip(), count=1)
    if " " not in text or len(text) > 400:  # the quick answer for most lines
        return None
    if _LOADED.search(text):
        return "loaded"
    if _LISTENING.search(text):
        return "listening"
    return None
