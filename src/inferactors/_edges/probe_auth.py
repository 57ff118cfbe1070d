"""A server's API key on our probes: ``Authorization: Bearer <key>`` on
every request of a prober opened for a server started with ``--api-key-file``. The key is
only ever in request headers, never in a URL, a message or a repr."""

from __future__ import annotations

from collections.abc import Mapping

from .probe import Prober, ProberFactory


def api_key_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` for a server started with an API key (llama-server
    ``--api-key-file``), else nothing."""
    return {} if api_key is None else {"Authorization": f"Bearer {api_key}"}


def with_api_key(open_prober: ProberFactory, api_key: str | None) -> ProberFactory:
    """``open_prober`` whose probers send ``api_key`` (`api_key_headers`); unchanged
    without a key."""
    if api_key is None:
        return open_prober
    auth = api_key_headers(api_key)

    def open_with_key(
        base_url: str, timeout_s: float, /, *, headers: Mapping[str, str] | None = None
    ) -> Prober:
        return open_prober(base_url, timeout_s, headers={**(headers or {}), **auth})

    return open_with_key
