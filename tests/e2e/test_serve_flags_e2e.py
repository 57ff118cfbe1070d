"""Issue 9 item 4 against the real llama-server: a flag this build lacks is refused at
admission naming the flag and the version, the everyday flags start a server that reaches
Running, a server started with an API key file reaches Running (our probes send the key)
while the key stays out of ``ps``, events and status, and a projector and LoRA adapters are
resolved and pinned like the model."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import httpx
import psutil
import pytest
import trio

from inferactors import open_runtime
from inferactors._actors.admission import make_plan
from inferactors._actors.instance.pins import PinHold, pin_for_spawn
from inferactors._config.config import InferConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.bundle import Edges
from inferactors._edges.containment import resolve_run_as
from inferactors._errors import AdmissionRefused, InvalidConfig
from inferactors._events import ProcessStarted
from inferactors._flavor import InferFlavor
from inferactors._models.registry import ModelRegistry
from inferactors._status import InstanceState
from support import Unprivileged

READY_S = 60.0
LLAMA = InferFlavor.LLAMACPP


def chat(port: int, **serve: object) -> InferenceSpec:
    args = ServeArgs(port=port, **serve)  # type: ignore[arg-type]  # keyword fields forwarded
    return InferenceSpec(role="chat", runtime=LLAMA, model="tiny", serve=args)


async def test_a_flag_this_build_lacks_is_refused_naming_flag_and_version(
    managed_config: InferConfig, free_port: int, llama_server: Path
) -> None:
    async with open_runtime(managed_config, node_id="test") as runtime:
        for flag in ("--mlock", "--no-mmap"):
            with pytest.raises(InvalidConfig) as info:
                await runtime.admit(chat(free_port, extra_args=("--threads", "2", flag)))
            assert str(info.value) == (
                f"serve.extra_args[2]: {flag} is not a flag of {llama_server} "
                "(version: 0.5.0-dev (build 0, commit unknown))"
            )
        await runtime.admit(chat(free_port, extra_args=("--load-mode", "mlock")))
    cache = managed_config.managed.data_root / "serve-help"  # type: ignore[union-attr]
    assert len(list(cache.glob("*.json"))) == 1  # one --help for three admissions


async def test_everyday_flags_start_a_server_that_runs(
    managed_config: InferConfig, free_port: int
) -> None:
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    extra = (
        "--alias", "chat", "--jinja", "--chat-template", template, "-np", "2", "-b", "256",
        "-ub", "128", "-fa", "off", "--metrics", "--slots", "-lv", "3", "--cont-batching",
        "--load-mode", "mmap", "-t", "2", "--temp", "0.5", "--top-k", "20",
    )  # fmt: skip
    async with open_runtime(managed_config, node_id="test") as runtime:
        handle = await runtime.load(chat(free_port, extra_args=extra))
        await runtime.start(handle)
        with trio.fail_after(READY_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)
        assert (await runtime.deep_health(handle)).text
        async with httpx.AsyncClient(trust_env=False) as client:
            models = (await client.get(f"http://127.0.0.1:{free_port}/v1/models")).json()
            metrics = await client.get(f"http://127.0.0.1:{free_port}/metrics")
        assert "chat" in models["data"][0]["aliases"]
        assert metrics.status_code == 200
        await runtime.stop(handle, 5.0)


def key_file(directory: Path, owner: int, mode: int = 0o600) -> tuple[Path, str]:
    key = "sk-" + secrets.token_hex(16)
    path = directory / "api.key"
    path.write_text(key + "\n")
    os.chown(path, owner, -1)
    path.chmod(mode)
    return path, key


async def test_a_server_with_an_api_key_runs_and_the_key_stays_hidden(
    managed_config: InferConfig, free_port: int, server_dir: Path, unprivileged: Unprivileged
) -> None:
    uid = resolve_run_as(unprivileged.run_as).uid if unprivileged.run_as else os.geteuid()
    path, key = key_file(server_dir, uid)
    spec = chat(free_port, api_key_file=str(path))
    async with open_runtime(managed_config, node_id="test") as runtime:
        events = await runtime.subscribe()
        handle = await runtime.load(spec)
        await runtime.start(handle)
        with trio.fail_after(READY_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)  # the first token had the key
        assert (await runtime.deep_health(handle)).text
        base = f"http://127.0.0.1:{free_port}"
        async with httpx.AsyncClient(trust_env=False) as client:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            assert (await client.post(f"{base}/v1/chat/completions", json=body)).status_code == 401
        status = runtime.status(handle)
        assert status.pid is not None
        cmdline = psutil.Process(status.pid).cmdline()
        assert "--api-key-file" in cmdline
        assert str(path) in cmdline
        assert not any(key in arg for arg in cmdline)
        environ = psutil.Process(status.pid).environ()
        assert not any(key in value for value in environ.values())
        plan = await runtime._plan_of(handle)
        assert plan.api_key == key
        assert key not in repr(plan)
        assert key not in repr(status)
        await runtime.stop(handle, 5.0)
    seen = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    assert any(isinstance(e, ProcessStarted) for e in seen)
    assert not any(key in repr(event) for event in seen)


async def test_an_api_key_file_others_can_read_is_refused(
    managed_config: InferConfig, free_port: int, server_dir: Path, unprivileged: Unprivileged
) -> None:
    uid = resolve_run_as(unprivileged.run_as).uid if unprivileged.run_as else os.geteuid()
    async with open_runtime(managed_config, node_id="test") as runtime:
        path, key = key_file(server_dir, uid, 0o640)
        with pytest.raises(AdmissionRefused, match="mode 0640 lets group or others") as info:
            await runtime.admit(chat(free_port, api_key_file=str(path)))
        assert key not in str(info.value)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="giving the key file to another user (chown) needs root"
)
async def test_an_api_key_file_of_another_user_is_refused(
    managed_config: InferConfig, free_port: int, server_dir: Path, unprivileged: Unprivileged
) -> None:
    uid = resolve_run_as(unprivileged.run_as).uid if unprivileged.run_as else os.geteuid()
    async with open_runtime(managed_config, node_id="test") as runtime:
        path, key = key_file(server_dir, 0 if uid else 1)
        with pytest.raises(AdmissionRefused, match="not by the server's user") as info:
            await runtime.admit(chat(free_port, api_key_file=str(path)))
        assert key not in str(info.value)


def register_copies(
    registry: ModelRegistry, source: Path, where: Path, names: tuple[str, ...]
) -> None:
    """Register a copy of ``source`` under each name (stand-ins: the pin is what is tested)."""
    where.mkdir()
    for name in names:
        copy = where / f"{name}.gguf"
        copy.write_bytes(source.read_bytes())
        registry.add(copy, name=name)


async def test_a_projector_and_adapters_are_resolved_and_pinned_like_the_model(
    managed_config: InferConfig, free_port: int, tiny_gguf: Path, server_dir: Path
) -> None:
    managed = managed_config.managed
    assert managed is not None
    registry = ModelRegistry.open(managed.registry)
    extras = server_dir / "extras"
    register_copies(registry, tiny_gguf, extras, ("proj", "lora-a", "lora-b"))
    spec = chat(free_port, mmproj="proj", lora=("lora-a", "lora-b"))
    plan = await make_plan(
        spec, managed_config, registry=registry, edges=Edges(), instance_dir=server_dir / "inst"
    )
    assert plan.mmproj is not None
    assert plan.mmproj.name == "proj"
    assert [m.name for m in plan.lora] == ["lora-a", "lora-b"]
    assert str(extras / "proj.gguf") in map(str, plan.weight_files)
    with pin_for_spawn(registry, plan, None) as pinned:  # type: ignore[union-attr]
        assert not isinstance(pinned, PinHold)
        args = pinned.launch.args
        named = [args[i + 1] for i, a in enumerate(args) if a in ("--mmproj", "--lora")]
        assert len(named) == 3
        assert all(p.startswith("/proc/self/fd/") for p in named)
        fds = {int(p.rsplit("/", 1)[1]) for p in named}
        assert fds <= set(pinned.launch.pass_fds)
        assert len(fds) == 3  # each its own verified descriptor
    with (extras / "lora-b.gguf").open("r+b") as tampered:
        tampered.seek(100)
        tampered.write(b"\xff\xfe")
    held = pin_for_spawn(registry, plan, None)
    assert isinstance(held, PinHold)
    assert held.manifest.name == "lora-b"

    with pytest.raises(AdmissionRefused, match=r"serve\.mmproj nope: "):
        await make_plan(
            chat(free_port, mmproj="nope"), managed_config, registry=registry, edges=Edges(),
            instance_dir=server_dir / "inst",
        )  # fmt: skip
