"""The pin is checked at every spawn (issue 8, item 4), against real processes.

A model changed after it was loaded is refused at the first start, at a start after a stop
and at a supervised restart after a crash, with `PinMismatch` and a `ModelTampered` event
naming the shard. The instance is held down (Exited, stop reason ``tampered``): a start is
refused again, the refusal never counts as a crash nor starts a restart loop, until the
model is re-registered or the instance reloaded. Played by the fake server program of
``inferactors.testing`` and by the real llama-server on the tiny model.
"""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

import pytest
import trio

from actors.pin_support import (
    WAIT_S,
    PinLab,
    append_a_byte,
    chat,
    link_outside_the_root,
    rename_the_model_in_place,
)
from e2e.field_support import Recorder
from inferactors import (
    GaveUp,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    ModelTampered,
    PinMismatch,
    ProcessExited,
    ProcessStarted,
    RestartFailed,
    RestartPolicy,
    RestartScheduled,
    StopReason,
    open_runtime,
)
from inferactors._models.hashing import blake3_file
from inferactors.testing import FakeServerFaults

QUICK_RESTARTS = RestartPolicy(max_restarts=3, base_s=0.1, cap_s=0.1, jitter=0.0)


async def running(runtime: InferRuntime, handle: InstanceHandle) -> None:
    with trio.fail_after(WAIT_S):
        await runtime.wait_state(handle, InstanceState.RUNNING)


async def assert_held(
    runtime: InferRuntime, handle: InstanceHandle, found: str
) -> tuple[PinMismatch, str]:
    """A start is refused with `PinMismatch` naming the shard; status is Exited
    ``tampered``. Returns the refusal and the status detail."""
    with pytest.raises(PinMismatch) as refused:
        await runtime.start(handle)
    error = refused.value
    assert (error.model, error.shard) == ("tiny", "tiny.gguf")
    assert error.why.startswith("shard tiny.gguf: ")
    assert found in error.why
    status = runtime.status(handle)
    assert (status.state, status.stop_reason, status.pid) == (
        InstanceState.EXITED,
        "tampered",
        None,
    )
    assert status.detail is not None
    assert f"model tiny: {error.why}" in status.detail
    return error, status.detail


async def assert_one_tampered_event(log: Recorder, handle: InstanceHandle, why: str) -> None:
    await log.next(ModelTampered)  # on its way through the supervisor as the start fails
    (event,) = log.of(ModelTampered)
    assert (event.instance_id, event.model, event.shard, event.why) == (
        handle.instance_id,
        "tiny",
        "tiny.gguf",
        why,
    )


# ---- the fake server program ------------------------------------------------------------


async def test_a_model_tampered_after_load_is_refused_at_the_first_start_and_held(
    pin_lab: PinLab, free_port: int
) -> None:
    original = pin_lab.model.read_bytes()
    async with open_runtime(pin_lab.config(pin_lab.fake_program())) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        rename_the_model_in_place(pin_lab.model)  # size and mtime kept: ctime gives it away

        error, _detail = await assert_held(runtime, handle, "BLAKE3 differs")
        await assert_one_tampered_event(log, handle, error.why)

        pin_lab.model.write_bytes(original)  # restored, but not re-registered: still held
        again, _detail = await assert_held(runtime, handle, "BLAKE3 differs")
        assert again is error  # the hold answers; the model is not read again
        assert len(log.of(ModelTampered)) == 1
        assert log.of(ProcessStarted) == []

        await runtime.unload(handle)  # a reload: a new actor, and load verifies
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await running(runtime, handle)


async def test_a_start_after_a_stop_is_checked_and_re_registering_lifts_the_hold(
    pin_lab: PinLab, free_port: int
) -> None:
    async with open_runtime(pin_lab.config(pin_lab.fake_program())) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await running(runtime, handle)
        await runtime.stop(handle, 5.0)
        append_a_byte(pin_lab.model)

        error, detail = await assert_held(runtime, handle, "(resized)")
        assert detail.endswith("held until the model is re-registered or the instance reloaded")
        await assert_one_tampered_event(log, handle, error.why)

        pin_lab.reregister()  # the operator takes the file as it now is
        await runtime.start(handle)
        await running(runtime, handle)
        assert len(log.of(ProcessStarted)) == 2
        assert (runtime.status(handle)).stop_reason is None


async def test_a_supervised_restart_after_a_crash_is_refused_held_and_not_counted(
    pin_lab: PinLab, free_port: int
) -> None:
    crashing = pin_lab.fake_program(FakeServerFaults(crash_after_s=1.0, exit_code=3))
    slower = RestartPolicy(max_restarts=3, base_s=0.5, cap_s=0.5, jitter=0.0)
    config = pin_lab.config(crashing, restart=slower)
    async with open_runtime(config) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)

        crash = await log.next(ProcessExited)
        assert (crash.reason, crash.exit_code) == (StopReason.CRASH, 3)
        # Between the crash and the restart: done while it ran, the unlink would change the
        # served inode's ctime and stop it as tampered (test_pin_while_running).
        link_outside_the_root(pin_lab.model)  # the same bytes, somewhere else
        assert (await log.next(RestartScheduled)).attempt == 1
        tampered = await log.next(ModelTampered)
        assert tampered.shard == "tiny.gguf"
        assert "outside the model root" in tampered.why

        await trio.sleep(2.0)  # four restart delays: no loop starts
        assert len(log.of(RestartScheduled)) == 1
        assert log.of(RestartFailed) == []
        assert log.of(GaveUp) == []
        assert len(log.of(ProcessStarted)) == 1
        status = runtime.status(handle)
        assert (status.state, status.stop_reason, status.restarts) == (
            InstanceState.EXITED,
            "tampered",
            1,
        )
        assert status.supervision is None


@pytest.mark.exclusive  # every status answer within 0.1 s of real time
async def test_a_rehash_does_not_hold_the_event_loop_or_the_actor(
    pin_lab: PinLab, free_port: int
) -> None:
    """A changed 1 GiB model is re-hashed in full at the start; meanwhile the instance
    answers status at once."""
    big = pin_lab.model.with_name("big.gguf")
    with big.open("wb") as file:
        file.write(b"GGUF")
        file.truncate(1 << 30)  # sparse: hashing it reads memory, not the disk
    big.chmod(0o644)
    pin_lab.model.unlink()
    big.rename(pin_lab.model)
    pin_lab.reregister()
    blake3_file(pin_lab.model)  # the file's pages read once: the re-hash below is warm
    hashing_began = trio.current_time()
    blake3_file(pin_lab.model)  # what the re-hash at the start costs here
    hash_s = trio.current_time() - hashing_began
    async with open_runtime(pin_lab.config(pin_lab.fake_program())) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)  # a first start: what a start does once per process
        await running(runtime, handle)  # (first-use imports) is not in the gaps below
        await runtime.stop(handle, 5.0)
        info = pin_lab.model.stat()
        os.utime(pin_lab.model, ns=(info.st_atime_ns, info.st_mtime_ns + 1))  # re-hash it
        answers: list[float] = []
        asked_at: list[float] = []
        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def start() -> None:
                await runtime.start(handle)
                done.set()

            nursery.start_soon(start)
            while not done.is_set():
                asked = trio.current_time()
                asked_at.append(asked)
                runtime.status(handle)
                answers.append(trio.current_time() - asked)
                await trio.sleep(0.005)
        await running(runtime, handle)
    assert len(answers) >= 5, answers  # the start took a while: the model was re-hashed
    assert max(answers) < 0.1, answers
    # A hash run on the event loop would stall the loop (not one answer) for all of it.
    gaps = [later - earlier for earlier, later in itertools.pairwise(asked_at)]
    assert max(gaps) < hash_s / 2, (gaps, hash_s)


# ---- the real llama-server ---------------------------------------------------------------


@pytest.fixture
def llama_program(llama_server: Path) -> Path:
    return llama_server


async def test_the_real_llama_server_is_held_after_tampering_and_serves_once_re_registered(
    pin_lab: PinLab, llama_program: Path, free_port: int
) -> None:
    async with open_runtime(pin_lab.config(llama_program)) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await running(runtime, handle)
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        evidence = await runtime.stop(handle, 5.0)
        assert evidence.args[1].startswith("/proc/self/fd/")

        rename_the_model_in_place(pin_lab.model)
        error, _detail = await assert_held(runtime, handle, "BLAKE3 differs")
        await assert_one_tampered_event(log, handle, error.why)

        pin_lab.reregister()
        await runtime.start(handle)
        await running(runtime, handle)
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        assert len(log.of(ProcessStarted)) == 2


async def test_the_real_llama_server_killed_after_tampering_is_not_restarted(
    pin_lab: PinLab, llama_program: Path, free_port: int
) -> None:
    # The byte goes in after the crash, inside the backoff: before it, the pin watch of the
    # running server could stop it as tampered first, and this test is about the restart.
    backoff = RestartPolicy(max_restarts=3, base_s=0.5, cap_s=0.5, jitter=0.0)
    async with open_runtime(pin_lab.config(llama_program, restart=backoff)) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await running(runtime, handle)
        started = await log.next(ProcessStarted)

        os.kill(started.pid, signal.SIGKILL)
        assert (await log.next(ProcessExited)).reason is StopReason.CRASH
        append_a_byte(pin_lab.model)
        assert (await log.next(RestartScheduled)).attempt == 1
        assert "(resized)" in (await log.next(ModelTampered)).why

        await trio.sleep(1.0)
        assert len(log.of(ProcessStarted)) == 1
        assert len(log.of(RestartScheduled)) == 1
        assert log.of(RestartFailed) == []
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "tampered")
