"""`pin_launch` with a projector and LoRA adapters (issue 9 item 4): each ``--mmproj`` and
``--lora`` value (mlx_lm.server's ``--adapter-path`` directory) becomes its own verified
descriptor's path, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors import InferFlavor, InvalidConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._flavor import ModelFormat
from inferactors._models.manifest import ResolvedModel
from inferactors._policy.launch import Launch, build_launch
from inferactors._policy.pin_launch import PinnedFds, pin_launch

MODEL = PinnedFds(shards=(("tiny.gguf", 9),))


def planned(*args: str) -> Launch:
    return Launch(Path("/opt/server"), args, Path("/srv/i"), ())


def one(fd: int) -> PinnedFds:
    return PinnedFds(shards=((f"f{fd}.gguf", fd),))


def test_projector_and_each_lora_get_their_own_descriptor_in_order() -> None:
    launch = planned(
        "-m", "/m/tiny.gguf", "--mmproj", "/m/proj.gguf", "--lora", "/m/a.gguf",
        "--lora", "/m/b.gguf", "--api-key-file", "/etc/key", "--jinja",
    )  # fmt: skip
    extras = [("--mmproj", one(20)), ("--lora", one(21)), ("--lora", one(22))]
    pinned = pin_launch(launch, InferFlavor.LLAMACPP, MODEL, extras=extras)
    assert pinned.args == (
        "-m", "/proc/self/fd/9", "--alias", "/m/tiny.gguf", "--mmproj", "/proc/self/fd/20",
        "--lora", "/proc/self/fd/21", "--lora", "/proc/self/fd/22",
        "--api-key-file", "/etc/key", "--jinja",
    )  # fmt: skip
    assert pinned.pass_fds == (9, 20, 21, 22)


def test_an_mlx_adapter_directory_is_served_through_its_view() -> None:
    launch = planned("--model", "/m/tiny", "--adapter-path", "/m/adapter", "--port", "1")
    model = PinnedFds((("model.safetensors", 6),), view_fd=5, linked=(6,))
    adapter = PinnedFds((("adapters.safetensors", 8),), view_fd=7, linked=(8, 10))
    pinned = pin_launch(launch, InferFlavor.MLX_LM, model, extras=[("--adapter-path", adapter)])
    assert pinned.args == (
        "--model",
        "/proc/self/fd/5",
        "--adapter-path",
        "/proc/self/fd/7",
        "--port",
        "1",
    )
    assert pinned.pass_fds == (5, 6, 7, 8, 10)


def test_more_extras_than_flags_is_refused() -> None:
    launch = planned("-m", "/m/tiny.gguf", "--lora", "/m/a.gguf")
    with pytest.raises(InvalidConfig, match="the launch has no --lora to pin"):
        pin_launch(launch, InferFlavor.LLAMACPP, MODEL, extras=[("--lora", one(1))] * 2)


def resolved(name: str, fmt: ModelFormat, path: str) -> ResolvedModel:
    return ResolvedModel(name=name, format=fmt, root=Path(path).parent, shards=(Path(path),))


def built(spec: InferenceSpec, model: ResolvedModel, **extras: object) -> tuple[str, ...]:
    launch = build_launch(
        spec, model, None, program=Path("/p"), cwd=Path("/c"), env=(), passthrough=(),
        parent_env={}, **extras,  # type: ignore[arg-type]
    )  # fmt: skip
    return launch.args


def test_build_launch_names_the_projector_adapters_and_key_file() -> None:
    tiny = resolved("tiny", ModelFormat.GGUF, "/m/tiny.gguf")
    proj, lora = (
        resolved("proj", ModelFormat.GGUF, "/m/p.gguf"),
        resolved("a", ModelFormat.GGUF, "/m/a.gguf"),
    )
    serve = ServeArgs(
        port=1, mmproj="proj", lora=("a",), api_key_file="/k", extra_args=("--jinja",)
    )
    spec = InferenceSpec(role="r", runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)
    args = built(spec, tiny, mmproj=proj, lora=(lora,))
    assert args[6:] == (
        "--mmproj",
        "/m/p.gguf",
        "--lora",
        "/m/a.gguf",
        "--api-key-file",
        "/k",
        "--jinja",
    )
    with pytest.raises(InvalidConfig, match=r"serve\.mmproj is proj but the projector given"):
        built(spec, tiny, lora=(lora,))
    with pytest.raises(InvalidConfig, match=r"serve\.lora names"):
        built(spec, tiny, mmproj=proj)


def test_build_launch_gives_mlx_its_adapter_directory() -> None:
    mlx = ResolvedModel(
        name="m", format=ModelFormat.MLX, root=Path("/m/mlx"), shards=(Path("/m/mlx/w"),)
    )
    adapter = ResolvedModel(
        name="ad",
        format=ModelFormat.MLX,
        root=Path("/m/ad"),
        shards=(Path("/m/ad/adapters.safetensors"),),
    )
    spec = InferenceSpec(
        role="r", runtime=InferFlavor.MLX_LM, model="m", serve=ServeArgs(port=1, lora=("ad",))
    )
    assert built(spec, mlx, lora=(adapter,))[-2:] == ("--adapter-path", "/m/ad")
