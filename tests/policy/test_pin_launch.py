"""Tests of `pin_launch` (pure): the model paths of a planned launch become the paths of the
verified descriptors the server inherits (issue 8, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors import InferFlavor, InvalidConfig, Unsupported
from inferactors._policy.launch import Launch
from inferactors._policy.pin_launch import PinnedFds, pin_launch, served_as_directory

PLANNED = ("-m", "/models/tiny.gguf", "--host", "127.0.0.1", "--port", "8090", "--threads", "2")
ONE_FILE = PinnedFds(shards=(("tiny.gguf", 9),))
SPLIT = PinnedFds(
    shards=(("q-00001-of-00002.gguf", 12), ("q-00002-of-00002.gguf", 13)),
    view_fd=11,
    linked=(12, 13, 14),
)


def planned(*args: str) -> Launch:
    return Launch(Path("/opt/llama-server"), args, Path("/srv/i"), (("PATH", "/bin"),))


def test_a_one_file_gguf_is_served_from_its_own_descriptor_under_its_old_name() -> None:
    pinned = pin_launch(planned(*PLANNED), InferFlavor.LLAMACPP, ONE_FILE)
    assert pinned.args == (
        "-m", "/proc/self/fd/9", "--alias", "/models/tiny.gguf",
        "--host", "127.0.0.1", "--port", "8090", "--threads", "2",
    )  # fmt: skip
    assert pinned.pass_fds == (9,)
    assert (pinned.program, pinned.cwd, pinned.env) == (
        Path("/opt/llama-server"),
        Path("/srv/i"),
        (("PATH", "/bin"),),
    )


def test_a_split_gguf_and_its_draft_are_served_through_their_views() -> None:
    args = (*PLANNED[:2], "-md", "/d/q-00001-of-00002.gguf", *PLANNED[2:])
    pinned = pin_launch(planned(*args), InferFlavor.LLAMACPP, ONE_FILE, SPLIT)
    assert pinned.args[:6] == (
        "-m", "/proc/self/fd/9", "--alias", "/models/tiny.gguf",
        "-md", "/proc/self/fd/11/q-00001-of-00002.gguf",
    )  # fmt: skip
    assert pinned.pass_fds == (9, 11, 12, 13, 14)  # the view and every file it links to


def test_an_mlx_directory_is_served_from_its_view_without_alias() -> None:
    launch = planned("--model", "/models/tiny-mlx", "--host", "127.0.0.1", "--port", "8090")
    model = PinnedFds((("model.safetensors", 6),), view_fd=5, linked=(6, 8))
    pinned = pin_launch(launch, InferFlavor.MLX_LM, model)
    assert pinned.args == ("--model", "/proc/self/fd/5", "--host", "127.0.0.1", "--port", "8090")
    assert pinned.pass_fds == (5, 6, 8)


def test_a_model_read_as_a_directory_without_its_view_is_refused() -> None:
    """Never the model's own directory: there, a file added after the check is read."""
    mlx = planned("--model", "/models/tiny-mlx")
    with pytest.raises(InvalidConfig, match="needs its view"):
        pin_launch(mlx, InferFlavor.MLX_LM, PinnedFds((("model.safetensors", 6),)))
    split = PinnedFds((("q-00001-of-00002.gguf", 12), ("q-00002-of-00002.gguf", 13)))
    with pytest.raises(InvalidConfig, match="needs its view"):
        pin_launch(planned(*PLANNED), InferFlavor.LLAMACPP, split)
    assert served_as_directory(InferFlavor.MLX_LM, 1)
    assert served_as_directory(InferFlavor.LLAMACPP, 2)
    assert not served_as_directory(InferFlavor.LLAMACPP, 1)


def test_another_descriptor_directory_can_be_named() -> None:
    pinned = pin_launch(planned(*PLANNED), InferFlavor.LLAMACPP, ONE_FILE, fd_dir="/dev/fd")
    assert pinned.args[1] == "/dev/fd/9"


def test_a_launch_without_its_model_flag_or_a_flavor_never_started_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="the launch has no -m to pin"):
        pin_launch(planned("--port", "8090"), InferFlavor.LLAMACPP, ONE_FILE)
    with pytest.raises(InvalidConfig, match="the launch has no -md to pin"):
        pin_launch(planned(*PLANNED), InferFlavor.LLAMACPP, ONE_FILE, SPLIT)
    with pytest.raises(Unsupported):
        pin_launch(planned(*PLANNED), InferFlavor.OLLAMA, ONE_FILE)
