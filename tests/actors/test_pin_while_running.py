"""The pin holds for the server's whole life, not only at its spawn (issue 8, item 4).

llama.cpp maps its model: whoever may write the registered file can change its bytes in
place (same inode, same size, mtime set back) after the check, and a running server serves
them. The verified descriptors stay open while the server lives and are re-checked (``fstat``
against the stamp recorded at the check) on the exposure watch's tick, every
`RECORD_REFRESH_S`. ctime cannot be set back, so the write is seen: `ModelTampered`, the
server stopped with reason ``tampered`` (never restarted nor counted), and the instance held
down until the model is re-registered. Played by the real llama-server as ``nobody`` on the
tiny model, and on a fake fleet under MockClock.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio
import trio.testing

from actors.pin_support import WAIT_S, PinLab, chat, rename_the_model_in_place
from e2e.field_support import Recorder
from inferactors import (
    InferConfig,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ModelTampered,
    PinMismatch,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    StopReason,
    open_runtime,
)
from inferactors._actors.instance.exposure import RECORD_REFRESH_S
from inferactors._models.registry import ModelRegistry
from inferactors.testing import FakeFleet

QUICK_RESTARTS = RestartPolicy(max_restarts=3, base_s=0.1, cap_s=0.1, jitter=0.0)
WHY = "shard tiny.gguf: changed while served: ctime differs"
"""Size kept and mtime set back: only ctime gives the write away."""


@pytest.mark.exclusive  # stopped within 2 s of real time
async def test_an_in_place_write_stops_the_running_llama_server_and_holds_it(
    pin_lab: PinLab, llama_server: Path, free_port: int
) -> None:
    async with open_runtime(pin_lab.config(llama_server, restart=QUICK_RESTARTS)) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        with trio.fail_after(WAIT_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        (started,) = log.of(ProcessStarted)
        restarts = (runtime.status(handle)).restarts

        written_at = trio.current_time()
        rename_the_model_in_place(pin_lab.model)  # r+b, same inode and size, mtime restored
        tampered = await log.next(ModelTampered, within_s=RECORD_REFRESH_S + 1.0)
        detected_s = trio.current_time() - written_at
        exited = await log.next(ProcessExited, within_s=2.0)
        stopped_s = trio.current_time() - written_at
        print(f"in-place write: detected after {detected_s:.3f} s, stopped after {stopped_s:.3f} s")
        assert (tampered.instance_id, tampered.model, tampered.shard, tampered.why) == (
            handle.instance_id,
            "tiny",
            "tiny.gguf",
            WHY,
        )
        assert (exited.pid, exited.reason) == (started.pid, StopReason.TAMPERED)
        assert stopped_s < 2.0

        await trio.sleep(1.0)  # ten restart delays: nothing restarts it
        assert log.of(RestartScheduled) == []
        assert len(log.of(ProcessStarted)) == 1
        status = runtime.status(handle)
        assert (status.state, status.stop_reason, status.pid, status.restarts) == (
            InstanceState.EXITED,
            "tampered",
            None,
            restarts,
        )
        assert status.detail is not None
        assert f"stopped: model tiny: {WHY}; held until" in status.detail

        with pytest.raises(PinMismatch):  # held: a start is refused, no second event
            await runtime.start(handle)
        assert len(log.of(ModelTampered)) == 1

        pin_lab.reregister()  # the operator takes the file as it now is
        await runtime.start(handle)
        with trio.fail_after(WAIT_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        assert len(log.of(ProcessStarted)) == 2


# ---- a fake fleet under MockClock ---------------------------------------------------------


@pytest.fixture
def fleet_config(tmp_path: Path, tiny_gguf: Path) -> InferConfig:
    model = tmp_path / "tiny.gguf"  # our own copy: this test writes into it
    shutil.copyfile(tiny_gguf, model)
    registry = tmp_path / "models.json"
    ModelRegistry.open(registry).add(model, name="tiny")
    managed = ManagedConfig(
        registry=registry,
        data_root=tmp_path / "state",
        serve_program=Path("/bin/true"),  # never run: the fleet's spawner is a fake
        restart=QUICK_RESTARTS,
        readiness_timeout_s=30.0,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


async def test_the_tick_catches_an_in_place_write_within_one_refresh(
    fleet_config: InferConfig, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet()
    async with open_runtime(fleet_config, node_id="pin", edges=fleet.edges()) as runtime:
        log = Recorder(await runtime.subscribe(buffer=1000))
        handle = await runtime.load(chat(18600))
        await runtime.start(handle)
        await runtime.wait_state(handle, InstanceState.RUNNING)
        await trio.sleep(10 * RECORD_REFRESH_S)  # ten quiet ticks: nothing changed
        assert log.of(ModelTampered) == []

        written_at = trio.current_time()
        rename_the_model_in_place(tmp_path / "tiny.gguf")
        tampered = await log.next(ModelTampered, within_s=100.0)
        assert trio.current_time() - written_at <= RECORD_REFRESH_S
        assert tampered.why == WHY
        assert (await log.next(ProcessExited, within_s=100.0)).reason is StopReason.TAMPERED
        await trio.sleep(10.0)
        assert log.of(RestartScheduled) == []
        assert fleet.live == []
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "tampered")
