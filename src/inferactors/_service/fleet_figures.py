"""What the servers report and cost, read for a scrape of the supervisor's ``/metrics``:
`read_figures` (``metrics_engines.py`` turns them into metrics).

Every member whose server is up is read at once: a llama.cpp server's own ``/metrics``
(`scrape_engine`, with the API key our probes send) and a managed server's process tree
(`tree_usage`, in a worker thread), all within `ENGINE_SCRAPE_S`.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from .._edges.engine_metrics import EngineScrape, scrape_engine
from .._edges.tree_usage import TreeUsage, tree_usage
from .._errors import InferactorsError
from .._flavor import InferFlavor
from .._status import InstanceState
from .members import Member

ENGINE_SCRAPE_S = 1.0
"""How long a scrape of ``/metrics`` waits for each server's own metrics, float seconds."""

Labels = tuple[str, str, str]


async def read_figures(
    members: Iterable[Member],
) -> tuple[dict[Labels, EngineScrape], dict[Labels, TreeUsage]]:
    """Each up member's scrape and tree use, by its (instance, flavor, mode) labels; what
    is not read within the deadline is left out."""
    scrapes: dict[Labels, EngineScrape] = {}
    usage: dict[Labels, TreeUsage] = {}
    with trio.move_on_after(ENGINE_SCRAPE_S + 0.5):
        async with trio.open_nursery() as nursery:
            for member in list(members):
                nursery.start_soon(_figures_of, member, scrapes, usage)
    return scrapes, usage


async def _figures_of(
    member: Member,
    scrapes: dict[Labels, EngineScrape],
    usage: dict[Labels, TreeUsage],
) -> None:
    """The figures of one member whose server is up: its own metrics (llama.cpp) and its
    process tree's use (managed)."""
    view = member.view()
    labels = (view.name, view.flavor, view.mode)
    if member.handle is None or view.status.state not in _UP:
        return
    pid = view.status.pid
    if pid is not None:
        used = await trio.to_thread.run_sync(tree_usage, pid)
        if used is not None:
            usage[labels] = used
    if member.placement.entry.spec.runtime is not InferFlavor.LLAMACPP:
        return
    try:
        base_url = await member.runtime.endpoint(member.handle)
        api_key = await member.runtime.api_key(member.handle)
    except InferactorsError:
        return  # unloaded meanwhile
    scrapes[labels] = await scrape_engine(base_url, api_key, ENGINE_SCRAPE_S)


_UP = (InstanceState.RUNNING, InstanceState.DEGRADED)
