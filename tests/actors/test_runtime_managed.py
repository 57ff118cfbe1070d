"""The runtime API in managed mode, for llama.cpp, through `open_runtime` only.

Seed-behaviour checklist items 1, 17, 29 to 31, 36 to 38, 41, 42, 46 to 50, 52, 62, 71 and
72 (sections 4 and 7). The real llama-server runs the happy path and the concurrency
cases; faults use ``tests/helpers/runtime_server.py``, a stand-in server program whose
behaviour the config's environment chooses (``RUNTIME_SERVER=silent,fork,...``). The
restart budget is 0 everywhere, so no test depends on when the supervisor restarts; as
root, servers run as ``nobody`` from the conftest's unprivileged workspace (issue 3, item 6).
Tests named after a bug guard its fix.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import socket
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import blake3
import psutil
import pytest
import trio
import trio.testing

from inferactors import (
    AdmissionRefused,
    BackendError,
    ControlMode,
    Event,
    InferactorsError,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InferRuntime,
    InstanceHandle,
    InstanceState,
    InvalidConfig,
    InvalidState,
    ManagedConfig,
    ModelFormat,
    ModelRegistry,
    NetworkExposure,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    ServeArgs,
    StopReason,
    Unsupported,
    open_runtime,
    serve_runtime,
)
from inferactors._edges.bundle import Edges
from inferactors._edges.netcheck import port_in_use
from support import Unprivileged

HELPER = Path(__file__).parents[1] / "helpers" / "runtime_server.py"
READY_S = 60.0


def managed(
    registry: Path,
    data_root: Path,
    program: Path | None,
    behaviour: str = "serve",
    *,
    run_as: str | None,
    **config: object,
) -> InferConfig:
    """A managed llama.cpp config that never restarts (restart budget 0)."""
    settings = ManagedConfig(
        registry=registry,
        data_root=data_root,
        serve_program=program,
        env=(("RUNTIME_SERVER", behaviour),),
        run_as=run_as,
        restart=RestartPolicy(max_restarts=0),
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, settings, **config)  # type: ignore[arg-type]


def chat(
    port: int, *, role: str = "chat", model: str | None = "tiny", host: str | None = None
) -> InferenceSpec:
    return InferenceSpec(
        role=role, runtime=InferFlavor.LLAMACPP, model=model, serve=ServeArgs(host=host, port=port)
    )


@attrs.frozen
class Lab:
    """Where one test's managed servers run: the registry (the tiny model as ``tiny``), a
    data root and the account (``nobody`` when the suite runs as root, see conftest), and
    ``program``, an executable that runs the helper server."""

    registry: Path
    data_root: Path
    run_as: str | None
    program: Path

    def config(
        self,
        program: Path | None = None,
        behaviour: str = "serve",
        *,
        registry: Path | None = None,
        **config: object,
    ) -> InferConfig:
        """`managed` with this lab's settings; ``program`` defaults to the helper."""
        return managed(
            registry or self.registry,
            self.data_root,
            program or self.program,
            behaviour,
            run_as=self.run_as,
            **config,
        )


@pytest.fixture
def lab(registry_path: Path, server_dir: Path, unprivileged: Unprivileged) -> Lab:
    program = server_dir / "bin" / "fake-llama-server"
    program.parent.mkdir(mode=0o755)
    python, helper = shlex.quote(unprivileged.python), shlex.quote(str(HELPER))
    program.write_text(f'#!/bin/sh\nexec {python} -I {helper} "$@"\n')
    program.chmod(0o755)
    return Lab(registry_path, server_dir / "state", unprivileged.run_as, program)


def drain(events: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    seen = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return seen


def started(events: list[Event]) -> list[ProcessStarted]:
    return [event for event in events if isinstance(event, ProcessStarted)]


def exits(events: list[Event]) -> list[ProcessExited]:
    return [event for event in events if isinstance(event, ProcessExited)]


async def next_exit(events: trio.MemoryReceiveChannel[Event]) -> ProcessExited:
    with trio.fail_after(READY_S):
        async for event in events:
            if isinstance(event, ProcessExited):
                return event
    raise AssertionError("the event stream ended")


async def read_pid(path: Path) -> int:
    """The pid the helper wrote to ``path``, once it is there."""
    file = trio.Path(path)
    with trio.fail_after(READY_S):
        while not await file.exists():  # noqa: ASYNC110  no trio event can tell us about a file
            await trio.sleep(0.01)
    return int(await file.read_text())


def names_in(directory: Path) -> list[str]:
    """The entries of ``directory``; none when it does not exist."""
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


def tamper(path: Path) -> None:
    """Flip every bit of the last byte of ``path``: same size, different digest."""
    with path.open("r+b") as file:
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 0xFF]))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pid: int) -> None:
    with trio.fail_after(10):
        while not gone(pid):  # noqa: ASYNC110  no trio event can tell us about OS state
            await trio.sleep(0.01)


async def ready(runtime: InferRuntime, handle: InstanceHandle) -> None:
    with trio.fail_after(READY_S):
        await runtime.wait_state(handle, InstanceState.RUNNING)


# The real llama-server.


async def test_a_real_llama_server_through_the_whole_contract(
    lab: Lab, llama_server: Path, tiny_gguf: Path, free_port: int
) -> None:
    config = lab.config(llama_server)
    async with open_runtime(config, node_id="node1") as runtime:
        assert runtime.id == "infer.llamacpp"
        assert runtime.control_mode is ControlMode.MANAGED
        assert runtime.network_exposure is NetworkExposure.NONE
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        material = f"chatinfer.llamacpptinyhttp://127.0.0.1:{free_port}managed"
        digest = blake3.blake3(material.encode()).hexdigest()[:8]
        assert handle.instance_id == f"chat-{digest}-node1"
        assert (lab.data_root / handle.instance_id).is_dir()
        assert (await runtime.status(handle)).state is InstanceState.LOADED
        assert await runtime.served_model(handle) == "tiny"
        with pytest.raises(Unsupported, match=r"cannot re-adopt .*not recoverable"):
            await runtime.adopt(handle, chat(free_port))
        with pytest.raises(Unsupported, match="has no console run"):
            await runtime.console(handle)

        await runtime.start(handle)
        with pytest.raises(InvalidState, match="already running"):
            await runtime.start(handle)
        await ready(runtime, handle)
        token = await runtime.deep_health(handle)
        assert token.text.strip()
        assert token.finish_reason == "length"

        evidence = await runtime.stop(handle, 5.0)
        assert (evidence.runtime, evidence.instance_id) == ("infer.llamacpp", handle.instance_id)
        assert evidence.exit_code == 0 or evidence.signal == signal.SIGTERM
        assert not evidence.killed_after_grace
        assert evidence.args[:2] == ("-m", str(await trio.Path(tiny_gguf).resolve()))
        await wait_gone(evidence.pid)
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        stopped = await runtime.status(handle)
        assert (stopped.state, stopped.stop_reason, stopped.pid) == (
            InstanceState.EXITED,
            "requested",
            None,
        )
        await runtime.unload(handle)
        assert not (lab.data_root / handle.instance_id).exists()
        assert (await runtime.status(handle)).state is InstanceState.UNKNOWN
    seen = drain(events)
    assert [event.pid for event in started(seen)] == [evidence.pid]
    assert [event.reason for event in exits(seen)] == [StopReason.REQUESTED]


async def test_two_concurrent_starts_spawn_one_real_server(
    lab: Lab, llama_server: Path, free_port: int
) -> None:
    async with open_runtime(lab.config(llama_server)) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        outcomes: list[object] = []

        async def start() -> None:
            try:
                await runtime.start(handle)
            except InferactorsError as error:
                outcomes.append(error)
            else:
                outcomes.append(None)

        with trio.fail_after(READY_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start)
                nursery.start_soon(start)
        assert None in outcomes
        refused = [o for o in outcomes if o is not None]
        assert len(refused) == 1
        assert isinstance(refused[0], InvalidState)
        assert "already running" in str(refused[0])
        await ready(runtime, handle)
        await runtime.stop(handle, 5.0)
        assert len(started(drain(events))) == 1


async def test_a_stop_sent_during_a_start_aborts_it_and_stops_the_new_server(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent")
    outcome: list[object] = []

    async def start(runtime: InferRuntime, handle: InstanceHandle) -> None:
        try:
            await runtime.start(handle)
        except InferactorsError as error:
            outcome.append(error)
        else:
            outcome.append(None)

    async def slow_port_check(host: str, port: int) -> bool:
        await trio.sleep(0.3)  # a port check that takes a while: the stop arrives meanwhile
        return await port_in_use(host, port)

    async with open_runtime(config, edges=Edges(port_in_use=slow_port_check)) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with trio.fail_after(READY_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start, runtime, handle)
                await trio.testing.wait_all_tasks_blocked()
                evidence = await runtime.stop(handle, 5.0)
        # Issue 3: a stop during a start aborts the start (unless the spawn won the race).
        assert outcome == [None] or (
            isinstance(outcome[0], InvalidState) and "aborted by a stop" in str(outcome[0])
        ), outcome
        assert evidence.instance_id == handle.instance_id
        assert evidence.signal == signal.SIGTERM
        await wait_gone(evidence.pid)
        assert (await runtime.status(handle)).state is InstanceState.EXITED
        seen = drain(events)
        assert [event.pid for event in started(seen)] == [evidence.pid]
        assert [event.reason for event in exits(seen)] == [StopReason.REQUESTED]


# Admission (items 17, 36, 37, 38).


async def test_managed_admit_refuses_missing_unknown_tampered_and_foreign_models(
    tmp_path: Path, tiny_gguf: Path, lab: Lab, free_port: int
) -> None:
    registry = tmp_path / "models.json"
    models = ModelRegistry.open(registry)
    copy = shutil.copy(tiny_gguf, tmp_path / "copy.gguf")
    models.add(Path(copy), name="copy")
    (tmp_path / "mlx").mkdir()
    (tmp_path / "mlx" / "config.json").write_text("{}")
    (tmp_path / "mlx" / "model.safetensors").write_bytes(b"\0" * 64)
    models.add(tmp_path / "mlx", name="mlxm", format=ModelFormat.MLX)
    tamper(Path(copy))
    refusals = {
        None: "managed mode needs a model",
        "nosuch": "model nosuch: ",
        "copy": "model copy: ",
        "mlxm": "infer.llamacpp cannot load a mlx model \\(mlxm\\)",
    }
    async with open_runtime(lab.config(registry=registry)) as runtime:
        for model, why in refusals.items():
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.admit(chat(free_port, model=model))
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.load(chat(free_port, model=model))
        assert await runtime.instances() == ()
    assert names_in(lab.data_root) == []


async def test_managed_admit_refuses_a_missing_or_non_executable_serve_program(
    tmp_path: Path, lab: Lab, free_port: int
) -> None:
    plain = tmp_path / "plain-file"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o644)
    cases = {
        None: "managed mode needs a serve program",
        tmp_path / "missing": "is not an executable file",
        plain: "is not an executable file",
        tmp_path: "is not an executable file",
    }
    for program, why in cases.items():
        async with open_runtime(
            managed(lab.registry, lab.data_root, program, run_as=lab.run_as)
        ) as runtime:
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.admit(chat(free_port))
            with pytest.raises(AdmissionRefused, match=why):
                await runtime.load(chat(free_port))


@contextmanager
def listening(port: int, backlog: int = 8) -> Iterator[socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen(backlog)
        yield listener


async def accept_and_record(listener: socket.socket, received: list[bytes]) -> None:
    """Accept connections on ``listener`` and record everything each one sent."""
    sock = trio.socket.from_stdlib_socket(listener)
    while True:
        connection, _ = await sock.accept()
        with connection:
            data = b""
            while chunk := await connection.recv(4096):
                data += chunk
            received.append(data)


async def test_an_occupied_port_is_refused_at_admit_with_a_bare_tcp_connect(
    lab: Lab, free_port: int
) -> None:
    received: list[bytes] = []
    config = lab.config()
    with listening(free_port) as listener:
        async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
            nursery.start_soon(accept_and_record, listener, received)
            with pytest.raises(AdmissionRefused) as refused:
                await runtime.admit(chat(free_port))
            with trio.fail_after(10):
                while not received:  # noqa: ASYNC110  the accepting task only appends
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert str(refused.value) == (
        f"something is already listening on http://127.0.0.1:{free_port}; "
        "adopt it instead of managing over it"
    )
    assert received == [b""], "the port check must send nothing, not even an HTTP request"


async def test_a_port_outside_the_allowed_range_is_refused_without_connecting(
    lab: Lab, free_port: int
) -> None:
    received: list[bytes] = []
    low = free_port + 1 if free_port < 65535 else 1
    config = lab.config(allowed_ports=(low, low))
    with listening(free_port) as listener:
        async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
            nursery.start_soon(accept_and_record, listener, received)
            with pytest.raises(AdmissionRefused, match="allowed range"):
                await runtime.admit(chat(free_port))
            with pytest.raises(AdmissionRefused, match="allowed range"):
                await runtime.load(chat(free_port))
            await trio.sleep(0.3)
            nursery.cancel_scope.cancel()
    assert received == []
    assert names_in(lab.data_root) == []


async def test_a_listener_with_a_full_accept_queue_is_an_occupied_port(
    lab: Lab, free_port: int
) -> None:
    with black_hole(free_port):
        async with open_runtime(lab.config()) as runtime:
            with pytest.raises(AdmissionRefused, match="already listening"):
                await runtime.admit(chat(free_port))


@contextmanager
def black_hole(port: int) -> Iterator[None]:
    """A listener on ``port`` that never accepts, its queue full: connects hang."""
    clients: list[socket.socket] = []
    with listening(port, backlog=0):
        try:
            for _ in range(8):
                client = socket.socket()
                clients.append(client)
                client.settimeout(0.2)
                try:
                    client.connect(("127.0.0.1", port))
                except TimeoutError:
                    break
            yield
        finally:
            for client in clients:
                client.close()


# Ids and addresses (items 29, 30, 41).


async def test_ids_duplicates_and_address_clashes_of_managed_instances(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config()) as runtime:
        first = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match=f"{first.instance_id} is already loaded"):
            await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match="is already used by another instance"):
            await runtime.load(chat(free_port, role="other"))
        with pytest.raises(InvalidState, match="is already used by another instance"):
            await runtime.load(chat(free_port, role="other", host="localhost"))
        elsewhere = await runtime.load(chat(free_port, role="other", host="127.0.0.2"))
        assert [h.instance_id for h in await runtime.instances()] == [
            first.instance_id,
            elsewhere.instance_id,
        ]


async def test_a_refused_load_leaves_no_instance_directory(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config()) as runtime:
        first = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState):
            await runtime.load(chat(free_port, role="other"))
    assert names_in(lab.data_root) == [first.instance_id]


# Faults, with the helper server (items 42, 46 to 50, 52).


async def test_a_server_not_listening_yet_is_degraded_starting(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        status = await runtime.status(handle)
        assert status.state is InstanceState.DEGRADED
        assert status.detail is not None
        assert status.detail.startswith("starting: not listening yet")
        assert status.pid == pid
        evidence = await runtime.stop(handle, 5.0)
        assert (evidence.exit_code, evidence.signal) == (None, signal.SIGTERM)
        assert not evidence.killed_after_grace


async def test_a_port_taken_between_load_and_start_spawns_nothing(lab: Lab, free_port: int) -> None:
    async with open_runtime(lab.config()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with listening(free_port), pytest.raises(BackendError) as refused:
            await runtime.start(handle)
        assert str(refused.value) == (
            f"http://127.0.0.1:{free_port} is already taken by something else; not starting over it"
        )
        assert not (lab.data_root / handle.instance_id / "pid").exists()
        assert (await runtime.status(handle)).state is InstanceState.LOADED
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        assert started(drain(events)) == []
        await runtime.start(handle)  # the port is free again
        await ready(runtime, handle)


async def test_stop_kills_a_group_that_ignores_sigterm_once_the_grace_is_over(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,ignore-term,fork")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        asked = trio.current_time()
        evidence = await runtime.stop(handle, 0.5)
        took_s = trio.current_time() - asked
        assert (evidence.exit_code, evidence.signal) == (None, signal.SIGKILL)
        assert evidence.killed_after_grace
        assert took_s >= 0.5
        await wait_gone(evidence.pid)
        await wait_gone(child)
        status = await runtime.status(handle)
        assert (status.state, status.exit_code, status.stop_reason) == (
            InstanceState.EXITED,
            None,
            "requested",
        )


async def test_a_server_that_exits_on_its_own_is_exited_as_a_crash(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,fork,exit=3@0.3")
    async with open_runtime(config) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        crash = await next_exit(events)
        assert (crash.instance_id, crash.pid, crash.reason) == (
            handle.instance_id,
            pid,
            StopReason.CRASH,
        )
        assert (crash.exit_code, crash.signal) == (3, None)
        status = await runtime.status(handle)
        assert (status.state, status.detail) == (InstanceState.EXITED, "server process exited")
        assert (status.exit_code, status.stop_reason, status.pid) == (3, "crash", None)
        await wait_gone(child)  # the whole group is reaped, not just the leader
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        (lab.data_root / handle.instance_id / "pid").unlink()
        await runtime.start(handle)  # an operator may start it again
        assert await read_pid(lab.data_root / handle.instance_id / "pid") != pid


async def test_unload_stops_a_running_server_and_deletes_its_directory(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="serve,fork")
    async with open_runtime(config) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await ready(runtime, handle)
        pid = (await runtime.status(handle)).pid
        assert pid is not None
        child = await read_pid(lab.data_root / handle.instance_id / "child")
        await runtime.unload(handle)
        assert gone(pid), "unload returned while the server still ran"
        assert not (lab.data_root / handle.instance_id).exists()
        assert (await runtime.status(handle)).state is InstanceState.UNKNOWN
        await wait_gone(child)
        assert [event.reason for event in exits(drain(events))] == [StopReason.UNLOAD]


async def test_a_serve_program_gone_before_start_is_refused_and_spawns_nothing(
    lab: Lab, free_port: int
) -> None:
    async with open_runtime(lab.config()) as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        with pytest.raises(InvalidState, match="not running"):
            await runtime.stop(handle)
        await trio.Path(lab.program).unlink()
        # BackendError "cannot start ..." as the start docstring says; as root, the run_as
        # reachability check refuses first with AdmissionRefused "... does not exist".
        with pytest.raises((BackendError, AdmissionRefused), match=re.escape(str(lab.program))):
            await runtime.start(handle)
        assert (await runtime.status(handle)).state is InstanceState.LOADED
        assert started(drain(events)) == []


# Commands that must always be answered.


async def test_unload_during_a_start_answers_the_start_and_a_waiting_stop(
    lab: Lab, free_port: int
) -> None:
    answers: list[object] = []

    async def ask(command: Awaitable[object]) -> None:
        with trio.fail_after(2):
            try:
                answers.append(await command)
            except InferactorsError as error:
                answers.append(error)

    config = lab.config(behaviour="silent")
    async with open_runtime(config) as runtime:
        handle = await runtime.load(chat(free_port))
        with black_hole(free_port):  # the start's port check now takes 300 ms
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, runtime.start(handle))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(ask, runtime.stop(handle, 1.0))
                await trio.testing.wait_all_tasks_blocked()
                await runtime.unload(handle)
    assert len(answers) == 2


async def test_a_stop_whose_caller_gave_up_still_stops_and_breaks_nothing(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,ignore-term")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        events = await runtime.subscribe()
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        await read_pid(lab.data_root / handle.instance_id / "pid")  # SIGTERM is ignored by now
        with trio.move_on_after(0.1):
            await runtime.stop(handle, 0.5)
        ended = await next_exit(events)
        assert ended.reason is StopReason.REQUESTED
        await trio.sleep(0.2)
        assert (await runtime.status(handle)).state is InstanceState.EXITED
        nursery.cancel_scope.cancel()


async def test_a_negative_stop_grace_fails_only_that_call(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        with pytest.raises((InvalidConfig, ValueError)):
            await runtime.stop(handle, -1.0)
        evidence = await runtime.stop(handle, 5.0)
        assert evidence.signal == signal.SIGTERM
        nursery.cancel_scope.cancel()


# Leaving the runtime.


async def test_cancelling_serve_runtime_sends_sigterm_first(lab: Lab, free_port: int) -> None:
    config = lab.config(behaviour="silent,note-term")
    async with trio.open_nursery() as nursery:
        runtime: InferRuntime = await nursery.start(serve_runtime, config)
        handle = await runtime.load(chat(free_port))
        await runtime.start(handle)
        pid = await read_pid(lab.data_root / handle.instance_id / "pid")
        nursery.cancel_scope.cancel()
    await wait_gone(pid)
    assert (lab.data_root / handle.instance_id / "term").exists(), "the server got no SIGTERM"


async def test_leaving_open_runtime_under_cancellation_is_prompt_and_graceful(
    lab: Lab, free_port: int
) -> None:
    config = lab.config(behaviour="silent,note-term")
    with trio.move_on_after(READY_S) as scope:
        async with open_runtime(config, stop_grace_s=0.1) as runtime:
            handle = await runtime.load(chat(free_port))
            await runtime.start(handle)
            await read_pid(lab.data_root / handle.instance_id / "pid")
            scope.cancel()
            cancelled_at = trio.current_time()
            await trio.sleep_forever()
    assert trio.current_time() - cancelled_at < 3.0
    assert (lab.data_root / handle.instance_id / "term").exists(), "the server got no SIGTERM"
