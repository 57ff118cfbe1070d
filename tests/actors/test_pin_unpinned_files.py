"""A server reads only the pinned files of its model (issue 8, items 4 and 5), against the
real servers run as the unprivileged user.

mlx_lm.server loads every ``model*.safetensors`` in the directory it is given, and
llama.cpp opens a split model's other files by name beside the first. So neither is given
the model's directory: each gets a view (``_models/pinned_view.py``) holding one link per
pinned file to that file's verified descriptor. A file added to the model directory after
registration is therefore never seen; the events report the argv actually executed.
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import trio

from actors.pin_support import WAIT_S
from e2e.field_support import Recorder
from edges.test_pinned_open import write_split_tiny_gguf
from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ModelFormat,
    ModelRegistry,
    ProcessStarted,
    RestartPolicy,
    ServeArgs,
    open_runtime,
)
from inferactors.testing import write_python_program
from mlx_support import readable_tiny_mlx
from support import Unprivileged

needs_mlx = pytest.mark.skipif(
    sys.platform != "linux" and find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed on this platform (the dev extra installs it on Linux)",
)


def config(lab: Path, flavor: InferFlavor, program: Path, run_as: str | None) -> InferConfig:
    managed = ManagedConfig(
        registry=lab / "models.json",
        data_root=lab / "state",
        serve_program=program,
        run_as=run_as,
        restart=RestartPolicy(max_restarts=0),
        readiness_timeout_s=WAIT_S * 2,
    )
    return InferConfig.managing(flavor, managed, deep_timeout_s=WAIT_S)


def spec(flavor: InferFlavor, model: str, port: int) -> InferenceSpec:
    return InferenceSpec(role="chat", runtime=flavor, model=model, serve=ServeArgs(port=port))


def command_line(pid: int) -> tuple[str, ...]:
    return tuple(Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1])


def mapped_and_open(pid: int) -> set[str]:
    """Every path the server maps or holds open."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    paths = {line.split(maxsplit=5)[5] for line in maps if len(line.split(maxsplit=5)) == 6}
    fds = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fds):
        try:
            paths.add(os.readlink(fds / fd))
        except OSError:
            pass  # closed meanwhile
    return paths


def view_seen_by(pid: int, served: str) -> list[str]:
    """The names in the view the server was given (``/proc/self/fd/V``), read through its
    descriptor table."""
    fd = served.removeprefix("/proc/self/fd/").split("/")[0]
    return sorted(os.listdir(f"/proc/{pid}/fd/{fd}"))


@needs_mlx
async def test_an_extra_weights_file_added_after_registration_is_never_seen_by_mlx(
    unprivileged: Unprivileged, free_port: int
) -> None:
    lab = unprivileged.directory("mlx-extra")
    model = readable_tiny_mlx(lab / "tiny-mlx")
    ModelRegistry.open(lab / "models.json").add(model, name="tiny", format=ModelFormat.MLX)
    pinned = sorted(p.name for p in model.iterdir())
    program = write_python_program(
        lab / "mlx_lm.server",
        entry="mlx_lm.server:main",
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )
    junk = model / "model-zzz.safetensors"  # globbed by mlx_lm's loader: garbage kills the load
    junk.write_bytes(b"garbage, not safetensors")
    junk.chmod(0o644)
    cfg = config(lab, InferFlavor.MLX_LM, program, unprivileged.run_as)
    async with open_runtime(cfg) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(spec(InferFlavor.MLX_LM, "tiny", free_port))
        await runtime.start(handle)
        with trio.fail_after(WAIT_S * 2):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        started = await log.next(ProcessStarted)
        assert started.args == command_line(started.pid)[-len(started.args) :]
        served = started.args[started.args.index("--model") + 1]
        assert served.startswith("/proc/self/fd/")
        assert view_seen_by(started.pid, served) == pinned
        assert str(junk) not in mapped_and_open(started.pid)
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        await runtime.stop(handle, 3.0)


async def test_a_split_gguf_is_served_through_a_view_of_its_pinned_splits_only(
    unprivileged: Unprivileged, llama_server: Path, free_port: int
) -> None:
    lab = unprivileged.directory("split-extra")
    model = lab / "split"
    model.mkdir(mode=0o755)
    splits = write_split_tiny_gguf(model)
    ModelRegistry.open(lab / "models.json").add(model, name="split")
    extra = model / "notes.json"  # not pinned: added after registration
    extra.write_text("{}")
    cfg = config(lab, InferFlavor.LLAMACPP, llama_server, unprivileged.run_as)
    async with open_runtime(cfg) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(spec(InferFlavor.LLAMACPP, "split", free_port))
        await runtime.start(handle)
        with trio.fail_after(WAIT_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        started = await log.next(ProcessStarted)
        assert started.args == command_line(started.pid)[1:]  # what runs, not the plan
        at = started.args.index("-m")
        served, alias = started.args[at + 1], started.args[at + 2 : at + 4]
        assert served.startswith("/proc/self/fd/")
        assert served.endswith("/tiny-00001-of-00002.gguf")
        assert alias == ("--alias", str(splits[0]))
        assert view_seen_by(started.pid, served) == [p.name for p in splits]
        assert (await runtime.deep_health(handle)).finish_reason == "length"
        await runtime.stop(handle, 3.0)
