"""A launch that hands the server the model descriptors that were verified (pure; issue 8,
item 5).

A path names whatever is there when it is opened; a descriptor names the file that was
checked. So the spawn keeps the registry's verified descriptors open across exec, at the
same numbers (`Launch.pass_fds`), and names them in argv through the descriptor directory
(``/proc/self/fd`` on Linux): the server's own ``open`` of ``/proc/self/fd/N`` opens the
very inode we hashed, whatever has been renamed, replaced or re-linked since.

- llama-server, one GGUF file: ``-m /proc/self/fd/F``, and ``--alias <the planned path>``
  so ``/v1/models`` lists the model under the same id as before (readiness matches on it).
- llama-server, split GGUF (``x-00001-of-00003.gguf``): llama.cpp finds the other splits by
  name beside the first, so the server gets the root directory's descriptor:
  ``-m /proc/self/fd/D/x-00001-of-00003.gguf``. The same goes for ``-md`` (no alias).
- mlx_lm.server, a model directory: ``--model /proc/self/fd/D``; it lists the path resolved,
  which is the real root, as before.

What a directory descriptor leaves open (an entry renamed over after the check) is stated
and measured in ``design/pinning.md``.
"""

from __future__ import annotations

import attrs

from .._errors import InvalidConfig, Unsupported
from .._flavor import InferFlavor
from .launch import Launch

FD_DIR = "/proc/self/fd"
"""Where a process finds its own descriptors as paths (Linux; ``/dev/fd`` on BSD and macOS)."""


@attrs.frozen
class PinnedFds:
    """The descriptors of one verified model, as numbers.

    Attributes:
        root_fd: the model root directory.
        shards: each shard's path relative to the root and its descriptor, in order.
    """

    root_fd: int
    shards: tuple[tuple[str, int], ...]


def served_path(model: PinnedFds, *, directory: bool, fd_dir: str = FD_DIR) -> tuple[str, int]:
    """The path the server opens for ``model`` and the descriptor it must inherit.

    A directory model, or one split over several files, is named through its root
    directory's descriptor (``fd_dir/D`` or ``fd_dir/D/<first shard>``); a one-file model
    through the file's own (``fd_dir/F``).

    Raises:
        InvalidConfig: a file model without shards.
    """
    if directory:
        return f"{fd_dir}/{model.root_fd}", model.root_fd
    if not model.shards:
        raise InvalidConfig("a pinned model without shards cannot be served")
    if len(model.shards) > 1:
        return f"{fd_dir}/{model.root_fd}/{model.shards[0][0]}", model.root_fd
    return f"{fd_dir}/{model.shards[0][1]}", model.shards[0][1]


def pin_launch(
    launch: Launch,
    flavor: InferFlavor,
    model: PinnedFds,
    draft: PinnedFds | None = None,
    *,
    fd_dir: str = FD_DIR,
) -> Launch:
    """``launch`` with each model path replaced by its descriptor's path (module docstring).

    The value after llama-server's ``-m`` (and ``-md`` with a ``draft``) or mlx_lm.server's
    ``--model`` is replaced; the descriptors named go to `Launch.pass_fds`. llama-server also
    gets ``--alias <the replaced path>`` after ``-m`` so it lists the model as before.

    Raises:
        InvalidConfig: the launch lacks the flag (it was not built by ``build_launch``).
        Unsupported: the flavor is Ollama, which inferactors never starts.
    """
    match flavor:
        case InferFlavor.LLAMACPP:
            paths = {"-m": served_path(model, directory=False, fd_dir=fd_dir)}
            if draft is not None:
                paths["-md"] = served_path(draft, directory=False, fd_dir=fd_dir)
        case InferFlavor.MLX_LM:
            paths = {"--model": served_path(model, directory=True, fd_dir=fd_dir)}
        case _:
            raise Unsupported(f"{flavor.id} is not a process inferactors starts")
    args = list(launch.args)
    for flag, (path, _fd) in paths.items():
        if flag not in args[:-1]:
            raise InvalidConfig(f"the launch has no {flag} to pin")
        at = args.index(flag) + 1
        planned, args[at] = args[at], path
        if flag == "-m":
            args[at + 1 : at + 1] = ["--alias", planned]
    fds = tuple(sorted({fd for _path, fd in paths.values()}))
    return attrs.evolve(launch, args=tuple(args), pass_fds=fds)
