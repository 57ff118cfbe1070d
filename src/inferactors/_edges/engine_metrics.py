"""A server's own metrics: `scrape_engine` reads ``GET /metrics`` of one inference server
(llama-server started with ``--metrics``) in the Prometheus text format, parsed by
prometheus-client's own parser (what its process tree costs is ``tree_usage.py``'s).

A server that offers no metrics (llama-server without ``--metrics`` answers 501, others
404) is `EngineScrape.offered` False, not a failure. Anything else that is not a parsed
200 within the deadline is a failure, said in words. The body is capped (`MAX_BYTES`), and
the API key the server wants (``serve.api_key_file``) is sent as our probes send it.
"""

from __future__ import annotations

import attrs
import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from .probe_auth import api_key_headers

MAX_BYTES = 1 << 20
"""The most of a ``/metrics`` body read (llama-server's is about 3 KiB)."""
NOT_OFFERED = frozenset({404, 501})


@attrs.frozen
class EngineScrape:
    """One scrape of a server's ``/metrics``.

    Attributes:
        families: the metric families it answered (parsed), empty when none.
        offered: False when the server has no metrics endpoint (404, 501).
        error: why the scrape failed, in words; None when it did not.
    """

    families: tuple[Metric, ...] = ()
    offered: bool = True
    error: str | None = None


async def scrape_engine(base_url: str, api_key: str | None, timeout_s: float) -> EngineScrape:
    """``GET base_url/metrics`` within ``timeout_s`` float seconds, parsed. Never raises for
    the server's faults (they are in `EngineScrape.error`); cancellation ends it."""
    timeout = httpx.Timeout(timeout_s)
    headers = api_key_headers(api_key)
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, headers=headers) as client,
            client.stream("GET", f"{base_url}/metrics") as reply,
        ):
            if reply.status_code in NOT_OFFERED:
                return EngineScrape(offered=False)
            body = await _capped(reply)
    except httpx.HTTPError as error:
        return EngineScrape(error=f"GET /metrics: {type(error).__name__}: {error}".rstrip(": "))
    except _TooLarge:
        return EngineScrape(error=f"GET /metrics: the body is over {MAX_BYTES} bytes")
    if reply.status_code != 200:
        return EngineScrape(error=f"GET /metrics returned HTTP {reply.status_code}")
    try:
        families = parse_metrics(body.decode("utf-8", "replace"))
    except ValueError as error:
        return EngineScrape(error=f"GET /metrics: not the Prometheus text format: {error}")
    return EngineScrape(families)


def parse_metrics(text: str) -> tuple[Metric, ...]:
    """The families of a Prometheus text exposition, with the names the server gave.

    prometheus-client's parser turns a counter into its OpenMetrics form: a sample of a
    counter whose name does not end in ``_total`` (llama.cpp's ``llamacpp:n_tokens_max``)
    is renamed with ``_total`` added. Such a family is given back as ``unknown`` (exposed
    as untyped) with the server's own sample names: a counter by that name cannot be
    written, and a renamed one is not what the server reports.

    Raises:
        ValueError: not the Prometheus text format.
    """
    families = tuple(text_string_to_metric_families(text))
    bare = {
        parts[2]
        for line in text.splitlines()
        if len(parts := line.split()) >= 4 and parts[:2] == ["#", "TYPE"] and parts[3] == "counter"
        if not parts[2].endswith("_total")
    }
    return tuple(
        _as_served(family) if family.type == "counter" and family.name in bare else family
        for family in families
    )


def _as_served(family: Metric) -> Metric:
    """A counter the parser renamed, as ``unknown`` under the server's own sample names."""
    served = Metric(family.name, family.documentation, "unknown")
    for sample in family.samples:
        name = (
            sample.name.removesuffix("_total")
            if sample.name == f"{family.name}_total"
            else sample.name
        )
        served.add_sample(name, sample.labels, sample.value, sample.timestamp)
    return served


class _TooLarge(Exception):
    pass


async def _capped(reply: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in reply.aiter_bytes():
        body += chunk
        if len(body) > MAX_BYTES:
            raise _TooLarge
    return bytes(body)
