"""A launch that hands the server the model descriptors that were verified, and nothing
else (pure).

A path names whatever is there when it is opened; a descriptor names the file that was
checked. So the spawn keeps the registry's verified descriptors open across exec, at the
same numbers (`Launch.pass_fds`), and names them in argv through the descriptor directory
(``/proc/self/fd`` on Linux): the server's own ``open`` of ``/proc/self/fd/N`` opens the
very inode we hashed, whatever has been renamed, replaced or re-linked since.

A server that reads a directory (mlx_lm.server globs ``model*.safetensors`` in it;
llama.cpp opens a split model's other files by name beside the first) is never given the
model's own directory, where a file added or renamed over after the check would be read.
It gets a *view* (``_models/pinned_view.py``): a private directory, built at the spawn and
held open, with one link per pinned file, at the same relative path, to
``/proc/self/fd/N`` of that file's verified descriptor. ``/proc/self`` resolves in the
process that opens it, so the server reaches exactly the inherited descriptors, and no
other name exists there. The view itself is named through its own descriptor.

- llama-server, one GGUF file: ``-m /proc/self/fd/F``, and ``--alias <the planned path>``
  so ``/v1/models`` lists the model under the same id as before (readiness matches on it).
- llama-server, split GGUF (``x-00001-of-00003.gguf``): ``-m /proc/self/fd/V/x-00001-of-
  00003.gguf`` (and the alias). The same goes for ``-md`` (no alias).
- mlx_lm.server, a model directory: ``--model /proc/self/fd/V``; it lists the path resolved,
  the view's, whose last component is the model root's name, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from .._errors import InvalidConfig, Unsupported
from .._flavor import InferFlavor
from .launch import Launch

FD_DIR = "/proc/self/fd"
"""Where a process finds its own descriptors as paths (Linux; ``/dev/fd`` on BSD and macOS)."""

VIEWS = "pinned"
"""The views' directory, inside the instance directory."""


def view_path(instance_dir: Path, slot: str, root_name: str) -> Path:
    """Where the view of ``slot`` (``"model"`` or ``"draft"``) of a model whose root is
    named ``root_name`` is built: the path mlx_lm.server lists its model under (it
    resolves ``/proc/self/fd/V``), ending in the root's own name."""
    return instance_dir / VIEWS / slot / (root_name or "model")


@attrs.frozen
class PinnedFds:
    """The descriptors of one verified model, as numbers.

    Attributes:
        shards: each shard's path relative to the root and its descriptor, in order.
        view_fd: the model's view (module docstring), for a model served as a directory;
            None for a one-file model, served from its own descriptor.
        linked: every descriptor the view's links name (shards and tokenizer files).
    """

    shards: tuple[tuple[str, int], ...]
    view_fd: int | None = None
    linked: tuple[int, ...] = ()


def served_as_directory(flavor: InferFlavor, shard_count: int) -> bool:
    """Whether a model of ``shard_count`` shards is read as a directory by ``flavor``'s
    server (so it needs a view): mlx_lm.server always, llama-server for a split model."""
    return flavor is InferFlavor.MLX_LM or shard_count > 1


def served_path(
    model: PinnedFds, *, directory: bool, fd_dir: str = FD_DIR
) -> tuple[str, tuple[int, ...]]:
    """The path the server opens for ``model`` and the descriptors it must inherit.

    A directory model, or one split over several files, is named through its view
    (``fd_dir/V`` or ``fd_dir/V/<first shard>``) and inherits the view and every linked
    descriptor; a one-file model is named through its own descriptor (``fd_dir/F``).

    Raises:
        InvalidConfig: a model without shards, or one that needs a view and has none.
    """
    if not model.shards:
        raise InvalidConfig("a pinned model without shards cannot be served")
    if not directory and len(model.shards) == 1:
        fd = model.shards[0][1]
        return f"{fd_dir}/{fd}", (fd,)
    if model.view_fd is None:
        raise InvalidConfig("a model served as a directory needs its view of pinned files")
    view = f"{fd_dir}/{model.view_fd}"
    path = view if directory else f"{view}/{model.shards[0][0]}"
    return path, (model.view_fd, *model.linked)


EXTRA_FLAGS = ("--mmproj", "--lora", "--adapter-path")
"""Flags whose value is a pinned file besides the model and the draft: a projector, LoRA
adapters (llama-server, one file each) and mlx_lm.server's adapter directory."""


def pin_launch(
    launch: Launch,
    flavor: InferFlavor,
    model: PinnedFds,
    draft: PinnedFds | None = None,
    *,
    extras: Sequence[tuple[str, PinnedFds]] = (),
    fd_dir: str = FD_DIR,
) -> Launch:
    """``launch`` with each model path replaced by its descriptor's path (module docstring).

    The value after llama-server's ``-m`` (and ``-md`` with a ``draft``) or mlx_lm.server's
    ``--model`` is replaced; so is, for each ``(flag, fds)`` of ``extras`` in order, the
    value after the next occurrence of that flag (`EXTRA_FLAGS`; an adapter directory is
    named through its view). The descriptors named go to `Launch.pass_fds`. llama-server
    also gets ``--alias <the replaced path>`` after ``-m`` so it lists the model as before.

    Raises:
        InvalidConfig: the launch lacks a flag (it was not built by ``build_launch``), or
            a model read as a directory has no view.
        Unsupported: the flavor is Ollama, which inferactors never starts.
    """
    match flavor:
        case InferFlavor.LLAMACPP:
            paths = [("-m", served_path(model, directory=False, fd_dir=fd_dir))]
            if draft is not None:
                paths.append(("-md", served_path(draft, directory=False, fd_dir=fd_dir)))
        case InferFlavor.MLX_LM:
            paths = [("--model", served_path(model, directory=True, fd_dir=fd_dir))]
        case _:
            raise Unsupported(f"{flavor.id} is not a process inferactors starts")
    for flag, extra in extras:
        directory = flag == "--adapter-path"
        paths.append((flag, served_path(extra, directory=directory, fd_dir=fd_dir)))
    args = list(launch.args)
    seen: dict[str, int] = {}
    for flag, (path, _fds) in paths:
        at = _value_at(args, flag, seen.get(flag, 0))
        seen[flag] = seen.get(flag, 0) + 1
        planned, args[at] = args[at], path
        if flag == "-m":
            args[at + 1 : at + 1] = ["--alias", planned]
    fds = tuple(sorted({fd for _flag, (_path, some) in paths for fd in some}))
    return attrs.evolve(launch, args=tuple(args), pass_fds=fds)


def _value_at(args: list[str], flag: str, skip: int) -> int:
    """The index of the value after the ``skip``-th (from 0) occurrence of ``flag``."""
    found = [i for i, arg in enumerate(args[:-1]) if arg == flag]
    if len(found) <= skip:
        raise InvalidConfig(f"the launch has no {flag} to pin")
    return found[skip] + 1
