"""Loading the model into Ollama: status while loading, keep_alive, long and failed loads.

Status runs Loaded, Degraded "loading model", Running, and a failed load is Degraded
(checklist 65); keep_alive is sent exactly as configured (66); a second start while
loading joins the load under way (issue 9 item 8, over checklist 69). The field cases: the
load request stays open for the whole load however long it takes (FC-18), a load past its
budget is a load timeout, and Ollama's own runner timeout is one too and is never retried
blind (FC-19); neither owes an unload, since the model never became ours (issue 9 item 7).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from actors.ollama_support import (
    RUNNER_TIMEOUT,
    TAG,
    load_body,
    loads,
    ollama_config,
    rig,
    slow,
    spec_at,
    unloads,
)
from inferactors import InstanceState, InstanceStatus, InvalidState, Up, open_runtime
from inferactors.testing._fake_ollama import FakeOllama, open_fake_ollama


async def test_checklist_65_status_runs_loaded_loading_running_and_a_failed_load_is_degraded(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=10.0)
    async with rig(fake) as r:
        assert await r.status() == InstanceStatus(InstanceState.LOADED, "model not resident")
        await r.start()
        assert (await r.status()).detail == "loading model"
        with trio.fail_after(60):
            running = await r.until(InstanceState.RUNNING)
        assert (running.old, running.detail) == (InstanceState.DEGRADED, "model resident")
        await r.stop()
        slow(fake, load_error="llama runner process has terminated: exit status 2")
        await r.start()
        with trio.fail_after(60):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail == (
            'load failed: ollama load returned HTTP 500: {"error": "llama runner process has '
            'terminated: exit status 2"}'
        )
        assert (await r.status()).detail == failed.detail


@pytest.mark.parametrize(
    ("keep_alive", "sent"),
    [("30m", "30m"), (-1, -1), (3600, 3600), ("-1", -1), ("3600", 3600)],  # seconds, issue 9
)
async def test_checklist_66_keep_alive_is_sent_as_configured(
    autojump_clock: trio.testing.MockClock,
    fake: FakeOllama,
    keep_alive: str | int,
    sent: str | int,
) -> None:
    async with rig(fake, keep_alive=keep_alive) as r:
        await r.start_running()
    assert [request.json for request in loads(fake)] == [load_body(sent)]
    assert type(load_body(sent)["keep_alive"]) is type(sent)


async def test_concurrent_starts_while_loading_join_the_one_load(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=60.0)
    async with rig(fake) as r:
        async with trio.open_nursery() as nursery:  # three callers at once: all succeed
            for _ in range(3):
                nursery.start_soon(r.start)
        await trio.sleep(1.0)
        await r.start()  # still loading: joins it too
        with trio.fail_after(120):
            await r.until(InstanceState.RUNNING)
        with pytest.raises(InvalidState, match="is already running"):
            await r.start()
    assert len(loads(fake)) == 1


async def test_fc18_the_load_request_stays_open_for_the_whole_load(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    """The fake aborts a load whose client hangs up; a 2-minute load against 2 s probe
    timeouts still ends resident, confirmed in /api/ps."""
    slow(fake, load_delay_s=120.0)
    async with rig(fake) as r:
        started = trio.current_time()
        await r.start()
        with trio.fail_after(600):
            await r.until(InstanceState.RUNNING, "model resident")
        assert trio.current_time() - started == pytest.approx(120.0, abs=0.5)
        assert TAG in fake.resident()
    assert len(loads(fake)) == 1


async def test_fc18_a_load_past_its_budget_is_a_load_timeout_and_owes_no_unload(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=600.0)
    async with rig(fake, load_budget_s=60.0) as r:
        await r.start()
        with trio.fail_after(600):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail == (
            "load failed: load timeout: ollama load of tiny:latest did not finish within 60 s"
        )
        assert TAG not in fake.resident()  # our hang-up aborted it
        await r.stop()
        assert (await r.status()).detail == "stopped on request"
    assert len(loads(fake)) == 1
    assert unloads(fake) == []  # the load never brought the model in: nothing of ours


async def test_fc18_over_a_real_socket_a_load_longer_than_the_probe_timeout_completes(
    tmp_path: Path, registry_file: Path
) -> None:
    config = ollama_config(registry_file, tmp_path / "state", probe_timeout_s=0.3)
    async with (
        open_fake_ollama(models=("tiny",), load_delay_s=1.5) as fake,
        open_runtime(config) as runtime,
    ):
        handle = await runtime.load(spec_at(fake.port))
        await runtime.start(handle)
        with trio.fail_after(30):
            status = await runtime.wait_state(handle, InstanceState.RUNNING)
        assert status.detail == "model resident"
        assert fake.resident() == (TAG,)
    assert len(loads(fake)) == 1
    assert len(unloads(fake)) == 1  # leaving open_runtime stops it


async def test_fc19_a_runner_timeout_is_a_load_timeout_and_is_not_retried(
    autojump_clock: trio.testing.MockClock, fake: FakeOllama
) -> None:
    slow(fake, load_delay_s=300.0, load_error=RUNNER_TIMEOUT)
    async with rig(fake) as r:
        await r.start()
        with trio.fail_after(600):
            failed = await r.until(InstanceState.DEGRADED, "load failed")
        assert failed.detail is not None
        assert failed.detail.startswith("load failed: load timeout: ollama load returned HTTP 500")
        assert RUNNER_TIMEOUT in failed.detail
        report = await r.health()
        assert isinstance(report.health, Up)  # the daemon is fine
        for _ in range(5):
            await trio.sleep(120.0)
            assert (await r.status()).detail == failed.detail
        assert len(loads(fake)) == 1  # no blind retry
        await r.stop()
    assert unloads(fake) == []  # Ollama said the load failed: never ours to unload
