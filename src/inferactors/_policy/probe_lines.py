"""Which lines of a server's output are the servers' own record of our probes.

mlx_lm.server logs every request on stderr in the standard library's access-log form
(``http.server.BaseHTTPRequestHandler.log_message``)::

    127.0.0.1 - - [05/Mar/2025 10:00:01] "GET /health HTTP/1.1" 200 -

and, probing every second, our monitor's ``GET /health`` and ``GET /v1/models`` would
otherwise fill a server's kept output (its 1 MiB evidence head and its ring of lines) within
hours. llama.cpp builds that log requests write ``request: GET /health 127.0.0.1 200``;
llama-server 0.3.36 (the one tested here) logs no request line at all, even ``--verbose``.

Neither logs the User-Agent, so a probe is known by what it asks: a GET (or HEAD) from a
loopback address of one of the read-only paths the probe uses (`PROBE_PATHS`). Such a line
is counted, not kept; a user's own ``GET /health`` from loopback is counted alike, which
loses nothing worth keeping. A completion (deep health) is never dropped: its lines are the
server's account of real work. Pure: no I/O.
"""

from __future__ import annotations

import re

PROBE_PATHS = ("/health", "/v1/health", "/v1/models", "/models", "/props", "/slots")
"""The read-only paths our probes GET (``_edges/probe.py``), with their aliases."""

_PATHS = "|".join(re.escape(path) for path in PROBE_PATHS)
_LOOPBACK = r"(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3})"
_QUERY = r"(?:\?[^\s\"]*)?"

_ACCESS_LOG = re.compile(
    rf"{_LOOPBACK} - - \[[^\]]*\] \"(?:GET|HEAD) (?:{_PATHS}){_QUERY} HTTP/1\.[01]\" "
    r"\d{3} \S+"
)
_LLAMA_REQUEST = re.compile(rf".*\brequest: (?:GET|HEAD) (?:{_PATHS}){_QUERY} {_LOOPBACK} \d{{3}}")


def is_probe_line(line: str) -> bool:
    """True when ``line`` (one output line, without its newline) is a server's log of a
    probe-like request: a GET or HEAD of a `PROBE_PATHS` path from loopback."""
    text = line.rstrip("\r\n")
    if " /" not in text:  # the quick answer for almost every line
        return False
    return bool(_ACCESS_LOG.fullmatch(text) or _LLAMA_REQUEST.fullmatch(text))
