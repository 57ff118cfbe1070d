"""Which requests to a loopback HTTP service come from a web page, and are refused (pure).

A service on loopback is reachable by every program on the machine, and by every web page
its browser shows: a page may send "simple" requests (a form's POST, an ``<img>``'s GET)
to ``http://127.0.0.1:PORT`` without asking, and a page whose own name was re-pointed at
127.0.0.1 (DNS rebinding) may even read the answers. Real clients (``openai``, ``ollama``,
``curl``) send no ``Origin`` and a loopback ``Host``; browsers mark their requests. So, as
Ollama does with its allowed origins and host check, one rule for the front door and the
control API (and the ``inferactors ui`` door):

- ``Host``: on a loopback-only service, it must be present and name a loopback address or
  ``localhost`` (`loopback_host`; a rebound name such as ``attacker.example`` is refused,
  and so is ``*.localhost``);
- ``Origin``: when present, it must be exactly the service's own, ``http://`` + its
  ``Host``;
- ``Sec-Fetch-Site``: when present, exactly ``same-origin`` or ``none`` (typed by the
  user).

The origin checks apply to every request of the front door; the control API exempts its
reads (GET, HEAD), which need its bearer token anyway (its page's shell, open to all,
holds no data), so a link from another site still opens the page. Where the two services'
earlier rules differed, the stricter one is kept (``Host`` required, ``*.localhost``
refused, exact ``Origin`` and ``Sec-Fetch-Site``).
"""

from __future__ import annotations

import attrs

from .._config.binding import is_loopback_name

OWN_FETCH_SITES = frozenset({"same-origin", "none"})
"""The ``Sec-Fetch-Site`` values of a request from the service's own page, or typed."""


@attrs.frozen
class BrowserRefusal:
    """Why a request is refused: the ``header`` at fault (``Host``, ``Origin`` or
    ``Sec-Fetch-Site``) and the ``message`` the client is told."""

    header: str
    message: str


def host_name(host: str) -> str | None:
    """The name part of a ``Host`` header value (``127.0.0.1:8765`` -> ``127.0.0.1``,
    ``[::1]:8765`` -> ``::1``, ``localhost`` -> ``localhost``), or None when it is not of
    that shape: an unclosed bracket, an IPv6 address without brackets, a port that is not
    digits, no name."""
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[1:end], host[end + 1 :]
        if end < 0 or ":" not in name:
            return None  # unclosed, or not an IPv6 address in its brackets
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    port = rest.removeprefix(":")
    if not name or rest[:1] not in ("", ":") or not (port == "" or _digits(port)):
        return None
    return name


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def loopback_host(host: str) -> bool:
    """Whether a ``Host`` header value (``127.0.0.1:8765``, ``[::1]:8765``, ``localhost``)
    names this machine's loopback (`is_loopback_name`)."""
    name = host_name(host)
    return name is not None and is_loopback_name(name)


def browser_refusal(
    host: str | None,
    origin: str | None,
    fetch_site: str | None,
    *,
    loopback_only: bool,
    check_origin: bool = True,
) -> BrowserRefusal | None:
    """Why a request with these headers (None: absent) is refused, or None when it may go
    on (module docstring).

    Args:
        host, origin, fetch_site: the ``Host``, ``Origin`` and ``Sec-Fetch-Site`` values.
        loopback_only: the service listens on loopback only (the ``Host`` check).
        check_origin: whether ``Origin`` and ``Sec-Fetch-Site`` are checked (False: a read
            of the control API).
    """
    if loopback_only and (host is None or not loopback_host(host)):
        named = "no Host" if host is None else f"Host {host!r}"
        return BrowserRefusal(
            "Host",
            f"{named} is not this loopback service's own address "
            "(a re-pointed name is refused: use 127.0.0.1, ::1 or localhost)",
        )
    if not check_origin:
        return None
    if origin is not None and (host is None or origin != f"http://{host}"):
        return BrowserRefusal(
            "Origin",
            f"Origin {origin!r} is not this service's own: cross-site requests are refused",
        )
    if fetch_site is not None and fetch_site not in OWN_FETCH_SITES:
        return BrowserRefusal(
            "Sec-Fetch-Site",
            f"Sec-Fetch-Site {fetch_site!r}: requests from another site are refused",
        )
    return None
