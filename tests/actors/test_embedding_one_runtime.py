"""One runtime for every flavor and both modes (issue 19 item 6): `InferConfig.all_flavors`
holds a managed llama.cpp instance beside adopted llama-server and mlx_lm.server ones, each
load choosing its mode; the one-flavor configs keep working as they did.

The servers are real processes: the kit's fake llama-server as the managed program, and
fakes started on their own as the adopted servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import trio

from inferactors import (
    AdmissionRefused,
    ControlMode,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InvalidConfig,
    ManagedConfig,
    NetworkExposure,
    ServeArgs,
    Unsupported,
    open_runtime,
)
from inferactors.testing import FakeServer, RuntimeKit, start_fake_server
from inferactors.testing._fake_processes import free_port

RUNNING_S = 30.0


@pytest.fixture
def adopted_servers(tmp_path: Path) -> Iterator[tuple[FakeServer, FakeServer]]:
    llama = start_fake_server(tmp_path / "llama", flavor="llamacpp")
    mlx = start_fake_server(tmp_path / "mlx", flavor="mlx", model="tiny-mlx")
    try:
        yield llama, mlx
    finally:
        llama.stop()
        mlx.stop()


def shared(kit: RuntimeKit) -> ManagedConfig:
    """The kit's managed settings without a program: each flavor's is named apart."""
    return ManagedConfig(
        registry=kit.registry(), data_root=kit.root / "state", run_as=kit.workspace.run_as
    )


def spec(role: str, flavor: InferFlavor, port: int, model: str | None = "tiny") -> InferenceSpec:
    return InferenceSpec(role=role, runtime=flavor, model=model, serve=ServeArgs(port=port))


async def test_one_runtime_holds_managed_and_adopted_instances_of_two_flavors(
    inferactors_kit: RuntimeKit, adopted_servers: tuple[FakeServer, FakeServer]
) -> None:
    llama, mlx = adopted_servers
    config = InferConfig.all_flavors(
        shared(inferactors_kit),
        serve_programs={InferFlavor.LLAMACPP: inferactors_kit.fake_program()},
    )
    async with open_runtime(config, node_id="one") as runtime:
        assert runtime.id == "infer"
        assert runtime.network_exposure is NetworkExposure.LAN
        ours = await runtime.load(spec("chat", InferFlavor.LLAMACPP, free_port()))
        theirs = await runtime.load(
            spec("their-chat", InferFlavor.LLAMACPP, llama.port, None), mode=ControlMode.ADOPTED
        )
        apple = await runtime.load(
            spec("mlx", InferFlavor.MLX_LM, mlx.port, "tiny-mlx"), mode=ControlMode.ADOPTED
        )
        handles = (ours, theirs, apple)
        assert [runtime.mode_of(h) for h in handles] == [
            ControlMode.MANAGED,
            ControlMode.ADOPTED,
            ControlMode.ADOPTED,
        ]
        for handle in handles:
            await runtime.start(handle)
        with trio.fail_after(RUNNING_S):
            for handle in handles:
                await runtime.wait_state(handle, InstanceState.RUNNING)
        every = runtime.statuses()
        assert list(every) == list(handles)
        pid = every[ours].pid
        assert pid is not None
        assert every[theirs].pid is None  # not ours: no process of ours
        assert (await runtime.deep_health(apple)).finish_reason is not None
        with pytest.raises(Unsupported):
            await runtime.stop(theirs)  # an adopted server is never signalled
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert llama.returncode() is None  # left alone
    assert mlx.returncode() is None


async def test_a_managed_flavor_without_its_program_is_refused_saying_so(
    inferactors_kit: RuntimeKit,
) -> None:
    """``locate_llama_server()`` found nothing: the None is left out, and a managed
    llama.cpp load says what is missing."""
    config = InferConfig.all_flavors(
        shared(inferactors_kit), serve_programs={InferFlavor.LLAMACPP: None}
    )
    assert config.serve_programs == ()
    async with open_runtime(config, node_id="one") as runtime:
        with pytest.raises(AdmissionRefused, match="needs a serve program"):
            await runtime.load(spec("chat", InferFlavor.LLAMACPP, free_port()))


async def test_an_adopted_only_runtime_of_every_flavor_refuses_a_managed_load(
    adopted_servers: tuple[FakeServer, FakeServer],
) -> None:
    llama, _ = adopted_servers
    async with open_runtime(InferConfig.all_flavors(), node_id="one") as runtime:
        assert runtime.control_mode is ControlMode.ADOPTED
        handle = await runtime.load(spec("chat", InferFlavor.LLAMACPP, llama.port, None))
        assert runtime.mode_of(handle) is ControlMode.ADOPTED
        with pytest.raises(AdmissionRefused, match="needs managed settings"):
            await runtime.load(
                spec("ours", InferFlavor.LLAMACPP, free_port()), mode=ControlMode.MANAGED
            )


async def test_a_one_flavor_runtime_keeps_its_flavor_and_its_mode(
    inferactors_kit: RuntimeKit, adopted_servers: tuple[FakeServer, FakeServer]
) -> None:
    llama, mlx = adopted_servers
    async with open_runtime(inferactors_kit.config(), node_id="old") as runtime:
        assert runtime.id == "infer.llamacpp"
        assert runtime.network_exposure is NetworkExposure.NONE
        with pytest.raises(AdmissionRefused, match="runs managed instances only"):
            await runtime.load(
                spec("theirs", InferFlavor.LLAMACPP, llama.port, None), mode=ControlMode.ADOPTED
            )
        with pytest.raises(AdmissionRefused, match=r"cannot run a infer\.mlx-lm workload"):
            await runtime.load(spec("mlx", InferFlavor.MLX_LM, mlx.port, "tiny-mlx"))
        handle = await runtime.load(inferactors_kit.spec())
        assert runtime.mode_of(handle) is ControlMode.MANAGED


def test_for_instance_gives_each_flavor_its_program_and_the_shared_settings(
    tmp_path: Path,
) -> None:
    managed = ManagedConfig(registry=tmp_path / "m.json", data_root=tmp_path / "s", run_as="nobody")
    program = tmp_path / "llama-server"
    config = InferConfig.all_flavors(
        managed, serve_programs={InferFlavor.LLAMACPP: program}, probe_timeout_s=3.0
    )
    llama = config.for_instance(InferFlavor.LLAMACPP, ControlMode.MANAGED)
    assert llama.flavor is InferFlavor.LLAMACPP
    assert llama.managed is not None
    assert (llama.managed.serve_program, llama.managed.run_as) == (program, "nobody")
    assert llama.probe_timeout_s == 3.0
    assert llama.adapter_id == "infer.llamacpp"
    ollama = config.for_instance(InferFlavor.OLLAMA, ControlMode.MANAGED)
    assert ollama.managed is not None
    assert ollama.managed.serve_program is None
    adopted = config.for_instance(InferFlavor.MLX_LM, ControlMode.ADOPTED)
    assert (adopted.managed, adopted.adapter_id) == (None, "infer.mlx-lm.adopted")
    one = InferConfig.adopted(InferFlavor.OLLAMA)
    assert one.for_instance(InferFlavor.OLLAMA, ControlMode.ADOPTED) is one


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (
            lambda m, p: InferConfig.all_flavors(
                ManagedConfig(m.registry, m.data_root, serve_program=p)
            ),
            "managed.serve_program",
        ),
        (
            lambda m, p: InferConfig.all_flavors(serve_programs={InferFlavor.LLAMACPP: p}),
            "serve_programs: without managed settings",
        ),
        (
            lambda m, p: InferConfig(
                None, m, serve_programs=((InferFlavor.LLAMACPP, p), (InferFlavor.LLAMACPP, p))
            ).validate(),
            r"serve_programs\[1\]: infer.llamacpp is named twice",
        ),
        (
            lambda m, p: InferConfig(
                InferFlavor.LLAMACPP, m, serve_programs=((InferFlavor.LLAMACPP, p),)
            ).validate(),
            "serve_programs: a one-flavor config",
        ),
    ],
)
def test_a_config_of_every_flavor_refuses_a_program_in_the_wrong_place(
    make: Callable[[ManagedConfig, Path], object], field: str, tmp_path: Path
) -> None:
    managed = ManagedConfig(registry=tmp_path / "m.json", data_root=tmp_path / "s")
    with pytest.raises(InvalidConfig, match=field):
        make(managed, tmp_path / "llama-server")
