"""Tests of the check-to-use window (issue 8, item 5): model files are opened beneath their
root without following links out of it (`open_beneath`), and the server is handed the very
descriptor that was verified (``/proc/self/fd/N``, inherited across exec): a file swapped
after the check is not what the server reads. The real llama-server, run as the session's
unprivileged user, loads from that descriptor (one file, and a split model through its
directory's descriptor).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import httpx
import pytest
import trio

from edges.process_support import PATH_ENV, linux_only
from inferactors import InferFlavor, PinMismatch
from inferactors._edges.containment import resolve_run_as
from inferactors._edges.process import ManagedProcess, open_child_process
from inferactors._models.pinned_view import build_views
from inferactors._models.pinning import OutsideRoot, PinnedModel, open_beneath
from inferactors._models.registry import ModelRegistry
from inferactors._policy.launch import Launch
from inferactors._policy.pin_launch import FD_DIR, PinnedFds, pin_launch
from inferactors._policy.privilege import RunAs
from inferactors.testing import write_tiny_gguf
from inferactors.testing._tiny_models import (
    _WORDS,
    _write_metadata,
    _write_tensors,
    tiny_vocabulary,
)
from support import Unprivileged

pytestmark = [linux_only, pytest.mark.usefixtures("no_leaked_processes")]

READY_S = 30.0


def opened(root: Path, relative: str, allowed: tuple[tuple[str, ...], ...] = ((),)) -> int:
    base_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return open_beneath(base_fd, Path(relative).parts, root.resolve(), allowed)
    finally:
        os.close(base_fd)


def inode_of(fd: int) -> int:
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A model root with a file, a subdirectory, and a file outside it."""
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "weights.gguf").write_bytes(b"GGUF inside")
    (model / "sub" / "deeper.gguf").write_bytes(b"GGUF deeper")
    (tmp_path / "outside.gguf").write_bytes(b"GGUF outside")
    return model


# ---- open_beneath ---------------------------------------------------------------------


def test_links_that_stay_inside_the_root_are_followed(root: Path) -> None:
    (root / "relative.gguf").symlink_to("sub/../weights.gguf")
    (root / "absolute.gguf").symlink_to(root / "sub" / "deeper.gguf")
    (root / "linked-dir").symlink_to("sub")
    weights, deeper = (root / "weights.gguf").stat(), (root / "sub" / "deeper.gguf").stat()
    assert inode_of(opened(root, "relative.gguf")) == weights.st_ino
    assert inode_of(opened(root, "absolute.gguf")) == deeper.st_ino
    assert inode_of(opened(root, "linked-dir/deeper.gguf")) == deeper.st_ino


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("relative.gguf", "../outside.gguf"),
        ("absolute.gguf", "{outside}"),
        ("sub/climbing.gguf", "../../outside.gguf"),
        ("dir", "{tmp}"),
    ],
)
def test_a_link_leading_out_of_the_root_is_refused(root: Path, link: str, target: str) -> None:
    tmp = root.parent
    (root / link).symlink_to(target.format(outside=tmp / "outside.gguf", tmp=tmp))
    relative = "dir/outside.gguf" if link == "dir" else link
    with pytest.raises(OutsideRoot, match="outside the model root"):
        opened(root, relative)


def test_dot_dot_above_the_root_is_refused(root: Path) -> None:
    with pytest.raises(OutsideRoot, match="outside the model root"):
        opened(root, "../outside.gguf")


def test_a_link_loop_fails_with_eloop(root: Path) -> None:
    (root / "a.gguf").symlink_to("b.gguf")
    (root / "b.gguf").symlink_to("a.gguf")
    with pytest.raises(OSError, match="too many levels of symbolic links") as failed:
        opened(root, "a.gguf")
    assert failed.value.errno == errno.ELOOP


def test_a_hugging_face_snapshot_may_reach_its_blobs_and_nothing_else(tmp_path: Path) -> None:
    repo = tmp_path / "models--me--tiny"
    snapshot = repo / "snapshots" / "abc123"
    for directory in (repo / "blobs", repo / "refs", snapshot):
        directory.mkdir(parents=True)
    (repo / "blobs" / "f00d").write_bytes(b"weights")
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "model.safetensors").symlink_to("../../blobs/f00d")
    (snapshot / "ref.json").symlink_to("../../refs/main")
    allowed = (("snapshots", "abc123"), ("blobs",))
    inside = ("snapshots", "abc123")
    fd = opened(repo, str(Path(*inside, "model.safetensors")), allowed)
    assert inode_of(fd) == (repo / "blobs" / "f00d").stat().st_ino
    with pytest.raises(OutsideRoot, match="refs/main, outside the model root"):
        opened(repo, str(Path(*inside, "ref.json")), allowed)


def test_a_fifo_in_place_of_a_shard_is_refused_without_blocking(tmp_path: Path) -> None:
    model = tmp_path / "m" / "tiny.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF" + bytes(64))
    registry = ModelRegistry.in_memory()
    manifest = registry.add(model, name="tiny")
    model.unlink()
    os.mkfifo(model)  # nobody ever writes: an open for reading without O_NONBLOCK would hang
    assert stat.S_ISFIFO(model.lstat().st_mode)
    with pytest.raises(PinMismatch, match=r"shard tiny\.gguf: is not a regular file"):
        registry.pin(manifest).close()


# ---- the descriptor is what the server gets ---------------------------------------------


def swap_in_garbage(path: Path) -> None:
    """Put other bytes at ``path`` (a new inode, renamed over it), as an attacker would."""
    garbage = path.with_name("garbage.tmp")
    garbage.write_bytes(b"not a model, " * 1000)
    garbage.chmod(0o644)
    garbage.replace(path)


def run_as_user(unprivileged: Unprivileged) -> RunAs | None:
    return resolve_run_as(unprivileged.run_as) if unprivileged.run_as else None


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while chunk := await stream.receive_some(65536):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_a_file_swapped_after_the_check_is_not_what_the_child_reads(
    unprivileged: Unprivileged,
) -> None:
    model = write_tiny_gguf(unprivileged.directory("swap") / "tiny.gguf")
    original = model.read_bytes()
    registry = ModelRegistry.in_memory()
    with registry.pin(registry.add(model, name="tiny")) as pinned:
        (fd,) = pinned.shard_fds()
        spare = os.open(model.parent, os.O_RDONLY)  # open in the parent, never passed
        swap_in_garbage(model)
        argv = ["/bin/sh", "-c", f"cat /proc/self/fd/{fd}; ls /proc/self/fd >&2"]
        try:
            child = await open_child_process(
                argv,
                cwd=model.parent,
                env=dict(PATH_ENV),
                run_as=run_as_user(unprivileged),
                pass_fds=(fd,),
            )
        finally:
            os.close(spare)
        async with trio.open_nursery() as nursery:
            errors: list[bytes] = []
            nursery.start_soon(_collect, child.stderr, errors)
            served = await read_all(child.stdout)
        await child.wait_exiting()
        assert child.reap() == 0
    assert served == original
    assert model.read_bytes() != original
    inherited = {int(name) for name in b"".join(errors).split()}
    assert fd in inherited
    assert spare not in inherited


async def _collect(stream: trio.abc.ReceiveStream, into: list[bytes]) -> None:
    into.append(await read_all(stream))


async def serve_pinned(
    llama_server: Path,
    unprivileged: Unprivileged,
    pinned: PinnedModel,
    planned: Path,
    port: int,
) -> tuple[str, int]:
    """Start the real llama-server on the pinned model as the unprivileged user, wait for
    one token; return the argv's model path and the server's uid. A split model is served
    through its view (``build_views``) in a fresh instance directory."""
    shards = tuple(zip((s.path for s in pinned.manifest.shards), pinned.shard_fds(), strict=True))
    planned_args = ("-m", str(planned), "--host", "127.0.0.1", "--port", str(port))
    fds = PinnedFds(shards)
    views: tuple[int, ...] = ()
    if len(shards) > 1:
        instance = unprivileged.directory(f"instance-{port}")
        views = build_views(instance, [("model", "split", pinned.fds)], fd_dir=FD_DIR)
        fds = PinnedFds(shards, views[0], tuple(pinned.fds.values()))
    launch = pin_launch(
        Launch(llama_server, planned_args, planned.parent, PATH_ENV), InferFlavor.LLAMACPP, fds
    )
    try:
        return await _serve(launch, unprivileged, pinned, port)
    finally:
        for view in views:
            os.close(view)


async def _serve(
    launch: Launch, unprivileged: Unprivileged, pinned: PinnedModel, port: int
) -> tuple[str, int]:
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch, run_as=run_as_user(unprivileged))
        try:
            token = await one_token(port)
            uid = os.stat(f"/proc/{process.pid}").st_uid
            maps = await trio.Path(f"/proc/{process.pid}/maps").read_text()
        finally:
            await process.terminate(5.0)
    assert token.strip() in _WORDS
    inodes = {int(line.split()[4]) for line in maps.splitlines() if len(line.split()) > 5}
    verified = {os.fstat(fd).st_ino for fd in pinned.shard_fds()}
    assert verified <= inodes  # it mapped every verified inode
    return launch.args[1], uid


async def one_token(port: int) -> str:
    body = {"prompt": "the cat", "n_predict": 1, "temperature": 0}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        with trio.fail_after(READY_S):
            while True:
                try:
                    reply = await client.post("/completion", json=body)
                except httpx.TransportError:
                    reply = None
                if reply is not None and reply.status_code == 200:
                    return str(reply.json()["content"])
                await trio.sleep(0.05)


async def test_the_real_llama_server_loads_the_verified_descriptor_as_the_user(
    llama_server: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    model = write_tiny_gguf(unprivileged.directory("served") / "tiny.gguf")
    registry = ModelRegistry.in_memory()
    with registry.pin(registry.add(model, name="tiny")) as pinned:
        swap_in_garbage(model)  # a path-based open would now load garbage and fail
        served, uid = await serve_pinned(llama_server, unprivileged, pinned, model, free_port)
    assert re.fullmatch(r"/proc/self/fd/\d+", served)
    if unprivileged.run_as is not None:
        assert uid == resolve_run_as(unprivileged.run_as).uid != 0


def write_split_tiny_gguf(directory: Path) -> list[Path]:
    """The tiny model split in two GGUF files (``tiny-0000N-of-00002.gguf``)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(directory / "tiny.gguf"), "llama", split_max_tensors=12)
    pieces, types = tiny_vocabulary()
    _write_metadata(writer, gguf, pieces, types)
    _write_tensors(writer, np, vocab=len(pieces), first_word=len(pieces) - len(_WORDS))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(directory.glob("tiny-*-of-*.gguf"))


async def test_a_split_model_is_served_through_its_view_of_verified_files(
    llama_server: Path, unprivileged: Unprivileged, free_port: int
) -> None:
    """The second split renamed over with garbage after the check: llama.cpp opens it by
    name beside the first, in the view, which links to the verified descriptor."""
    directory = unprivileged.directory("split")
    splits = write_split_tiny_gguf(directory)
    assert [p.name for p in splits] == ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]
    registry = ModelRegistry.in_memory()
    with registry.pin(registry.add(directory, name="split")) as pinned:
        swap_in_garbage(splits[1])  # served by name from the model's directory: a failed load
        served, _uid = await serve_pinned(llama_server, unprivileged, pinned, splits[0], free_port)
        assert re.fullmatch(r"/proc/self/fd/\d+/tiny-00001-of-00002\.gguf", served)
