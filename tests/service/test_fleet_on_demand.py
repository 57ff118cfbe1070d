"""On-demand instances in a `Fleet` (fake llama-servers, real processes): ``run`` loads
them without starting them and still settles; the scheduler starts one for a request;
an operator's stop, a reload and the fleet's close each drain it and stop it with their
reason; status and metrics show the scheduler's figures."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from inferactors import ProcessExited, ResidencyStop, StopReason
from inferactors._actors.front_door_msgs import ResidencyView
from inferactors._actors.front_door_scheduler import FrontDoorScheduler
from inferactors._actors.front_door_seam import Residency, Scheduler
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Check, Entry, RunFile, running, until

ON_DEMAND = "residency = { on_demand = true }\n"
RESIDENCY = "\n[residency]\nmax_wait_s = 30.0\ndrain_timeout_s = 5.0\nidle_ttl_s = 600.0\n"


def _write(run: RunFile, *entries: Entry) -> None:
    run.write(*entries)
    run.path.write_text(run.path.read_text() + RESIDENCY)


async def _door(fleet: Fleet) -> FrontDoorScheduler:
    assert fleet.door is not None
    with trio.fail_after(30.0):
        await fleet.door.opened.wait()
    assert fleet.door.scheduler is not None
    return fleet.door.scheduler


def resident(name: str) -> Check:
    """A check: the scheduler counts ``name`` as resident."""

    def check(fleet: Fleet) -> bool:
        residency = fleet.view(name).residency
        return residency is not None and residency.residency is Residency.RESIDENT

    return check


def _stops(fleet: Fleet, reason: StopReason) -> list[ResidencyStop]:
    return [
        e for e in fleet.recent_events(1000) if isinstance(e, ResidencyStop) and e.reason is reason
    ]


async def test_an_on_demand_instance_waits_for_its_first_request(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    _write(run, Entry("always", free_port()), Entry("lazy", free_port(), extra=ON_DEMAND))
    async with open_fleet(run.config(), run.path) as fleet:
        await _door(fleet)
        await until(fleet, running("always"))
        with trio.fail_after(30.0):
            await fleet.settled.wait()
        lazy = fleet.view("lazy")
        assert lazy.status.state is InstanceState.LOADED
        assert lazy.residency is not None
        assert lazy.residency.residency is Residency.NOT_LOADED
        assert lazy.residency.declared_bytes > 0  # the tiny model's shard and KV cache
        await until(fleet, resident("always"))  # its Running reached the scheduler
        always = fleet.view("always").residency
        assert always is not None
        assert not always.on_demand
        assert fleet.door is not None
        scheduler: Scheduler = fleet.door  # what `run` hands the front door's HTTP side
        assert [entry.name for entry in scheduler.models()] == ["always", "lazy"]
        with trio.fail_after(30.0):
            grant = await scheduler.acquire("lazy")
        assert grant.upstream.base_url.startswith("http://127.0.0.1:")
        await until(fleet, running("lazy"))
        residency = fleet.view("lazy").residency
        assert residency is not None
        assert residency.in_flight == 1
        _views_read_residency_once(fleet)
        grant.done()
        text = fleet.metrics_text().decode()
        assert 'inferactors_on_demand_starts_total{flavor="infer.llamacpp",instance="lazy"' in text
        assert 'figure="declared",flavor="infer.llamacpp",instance="lazy"' in text
        await fleet.stop("lazy")  # the operator's stop goes through the scheduler
        [stop] = _stops(fleet, StopReason.REQUESTED)
        assert stop.instance_id == fleet.view("lazy").instance_id
        assert 'reason="requested"' in fleet.metrics_text().decode()
    assert len(_stops(fleet, StopReason.SHUTDOWN)) == 1  # "always": drained, then stopped


def _views_read_residency_once(fleet: Fleet) -> None:
    """Every view with its scheduler's figures, the residency of every slot read once for
    them all (not once per instance: that made `Fleet.views` quadratic)."""
    reads: list[int] = []
    every = FrontDoorScheduler.residency

    def counted(scheduler: FrontDoorScheduler) -> dict[str, ResidencyView]:
        reads.append(1)
        return every(scheduler)

    FrontDoorScheduler.residency = counted  # type: ignore[method-assign,assignment]  # (slots)
    try:
        views = fleet.views()
    finally:
        FrontDoorScheduler.residency = every  # type: ignore[method-assign]
    assert len(reads) == 1
    assert views == tuple(fleet.view(view.name) for view in views)
    assert [view.residency is not None for view in views] == [True, True]


async def test_a_reload_drains_what_it_unloads_and_rebinds_the_scheduler(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    port = free_port()
    _write(run, Entry("lazy", port, extra=ON_DEMAND))
    async with open_fleet(run.config(), run.path) as fleet:
        door = await _door(fleet)
        with trio.fail_after(30.0):
            (await door.acquire("lazy")).done()
        await until(fleet, running("lazy"))
        _write(run, Entry("lazy", port, extra=ON_DEMAND, serve=", ctx = 2048"))
        result = await fleet.reload()
        assert result.changed == ("lazy",)
        assert len(_stops(fleet, StopReason.RELOAD)) == 1
        assert fleet.view("lazy").status.state is InstanceState.LOADED  # not started again
        with trio.fail_after(30.0):
            grant = await door.acquire("lazy")  # the reloaded instance, started on demand
        await until(fleet, running("lazy"))
        assert grant.upstream.base_url.endswith(f":{port}")
        grant.done()


SWAP = '\n[[residency.groups]]\nname = "pair"\nmembers = ["one", "two"]\nswap = true\n'


def _exits(fleet: Fleet, name: str) -> list[StopReason]:
    iid = fleet.view(name).instance_id
    return [
        e.reason
        for e in fleet.recent_events(1000)
        if isinstance(e, ProcessExited) and e.instance_id == iid
    ]


def _exit_counts(fleet: Fleet) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["instance"], sample.labels["reason"]): sample.value
        for family in text_string_to_metric_families(fleet.metrics_text().decode())
        for sample in family.samples
        if sample.name == "inferactors_process_exits_total"
    }


async def _stopped(fleet: Fleet, name: str, reason: StopReason) -> None:
    """Wait until ``name`` shows as exited for ``reason``."""

    def check(fleet: Fleet) -> bool:
        status = fleet.view(name).status
        return status.state is InstanceState.EXITED and status.stop_reason == reason.value

    await until(fleet, check)


async def test_ttl_eviction_and_reload_reach_the_process_status_and_metrics(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    ports = free_port(), free_port()
    ttl = "residency = { on_demand = true, idle_ttl_s = 1.0 }\n"
    entries = [Entry("one", ports[0], extra=ttl), Entry("two", ports[1], extra=ON_DEMAND)]
    _write(run, *entries)
    run.path.write_text(run.path.read_text() + SWAP)
    async with open_fleet(run.config(), run.path) as fleet:
        door = await _door(fleet)
        with trio.fail_after(30.0):
            (await door.acquire("two")).done()
            (await door.acquire("one")).done()  # one at a time: "two" is evicted
        await _stopped(fleet, "two", StopReason.EVICTED)
        assert fleet.view("two").status.detail == (
            "stopped: evicted to make room for another model (front door)"
        )
        await _stopped(fleet, "one", StopReason.TTL)  # then idle for its second
        assert _exits(fleet, "one") == [StopReason.TTL]
        with trio.fail_after(30.0):
            (await door.acquire("two")).done()
        two = fleet.view("two").instance_id
        _write(run, entries[0], Entry("two", ports[1], extra=ON_DEMAND, serve=", ctx = 2048"))
        run.path.write_text(run.path.read_text() + SWAP)
        await fleet.reload()  # "two" changed while resident: drained, stopped for reload
        assert [
            e.reason
            for e in fleet.recent_events(1000)
            if isinstance(e, ProcessExited) and e.instance_id == two
        ] == [StopReason.EVICTED, StopReason.RELOAD]
        counts = _exit_counts(fleet)
        assert counts[("two", "evicted")] == 1.0
        assert counts[("one", "ttl")] == 1.0
        assert counts[("two", "reload")] == 1.0
