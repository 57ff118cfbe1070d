"""Which requests to a loopback HTTP service come from a web page, and are refused (no I/O;
in ``_service`` for its use of ``urllib.parse``).

A service on loopback with no key is reachable by every program on the machine, and by
every web page its browser shows: a page may send "simple" requests (a form's POST, an
``<img>``'s GET) to ``http://127.0.0.1:PORT`` without asking, and a page whose own name
was re-pointed at 127.0.0.1 (DNS rebinding) may even read the answers. Real clients
(``openai``, ``ollama``, ``curl``) send no ``Origin`` and a loopback ``Host``; browsers mark
their requests. So, as Ollama does with its allowed origins and host check:

- ``Host``: on a loopback-only service, its name must be a loopback address or
  ``localhost`` (a rebound name such as ``attacker.example`` is refused);
- ``Origin``: when present, it must be the service's own (``http://`` + its ``Host``);
- ``Sec-Fetch-Site``: when present, ``same-origin`` or ``none`` (typed by the user).

A refusal is a 403 naming the header; nothing is started or forwarded before it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_OWN_FETCH_SITES = frozenset({"same-origin", "none"})


def browser_refusal(
    host: str | None, origin: str | None, fetch_site: str | None, *, loopback_only: bool
) -> str | None:
    """Why a request with these headers (None: absent) is refused, or None when it may go
    on. ``loopback_only``: the service listens on loopback only (the ``Host`` check)."""
    if loopback_only and host is not None and not _loopback_name(host):
        return (
            f"Host {host!r} is not this loopback service's own address "
            "(a re-pointed name is refused: use 127.0.0.1, ::1 or localhost)"
        )
    if origin is not None and not _same_origin(origin, host):
        return f"Origin {origin!r} is not this service's own: cross-site requests are refused"
    if fetch_site is not None and fetch_site.strip().lower() not in _OWN_FETCH_SITES:
        return f"Sec-Fetch-Site {fetch_site!r}: requests from another site are refused"
    return None


def _hostname(host: str) -> str | None:
    """The name part of a ``Host`` value (``[::1]:8080`` -> ``::1``); None when malformed."""
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


def _loopback_name(host: str) -> bool:
    name = _hostname(host)
    if name is None:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _same_origin(origin: str, host: str | None) -> bool:
    if host is None:
        return False
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    return parts.scheme == "http" and parts.netloc.lower() == host.strip().lower()
