"""``inferactors models import llama-swap CONFIG``: register each model a llama-swap config
runs and draft a run file with one managed instance per model.

The config is read as `inferactors._config.llama_swap` says (macros, ``${PORT}``, groups).
Each model's files (``-m``, and ``-md``, ``--mmproj``, ``--lora``; a relative path starts
from the config's folder) are registered under the model's id made a plain token (the draft
``<id>.draft``, projector ``<id>.mmproj``, adapters ``<id>.lora<N>``), then drafted as an
``[[instances]]`` entry naming them, with the port, context size, loopback host, KV cache
type and the allowlisted flags carried over; what is not carried is a comment above the
entry and a line of output. llama-swap runs one model at a time, often all on one port;
inferactors runs them side by side, so a port another draft took is moved to the next free
one (and said). The draft (a ``[managed]`` section naming this registry and the programs
the config runs, then the instances) is checked as a run file before it is written, as a
new file of mode 0600 (never through a link); an existing file is never overwritten.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import tomlkit

from .._config.convert import run_config_from_toml
from .._config.llama_swap import SwapSkip, read_llama_swap
from .._config.llama_swap_args import SwapDraft
from .._errors import InvalidConfig, one_line, printable
from .._models.registry import ModelRegistry
from .._untrusted_file import MiB, read_capped_text
from .import_tally import Tally, expected_files, import_one
from .models_common import HashProgress, with_registry

MAX_CONFIG_BYTES = 1 * MiB
"""The largest llama-swap config read."""


def import_llama_swap(args: argparse.Namespace) -> int:
    """``models import llama-swap CONFIG [--draft RUN_FILE]``."""
    config: Path = args.swap_config

    def run(registry: ModelRegistry) -> int:
        try:
            text = read_capped_text(config, MAX_CONFIG_BYTES, "llama-swap config")
        except OSError as error:
            raise InvalidConfig(f"{config}: cannot read it: {error.strerror}") from None
        try:
            parsed = read_llama_swap(text, os.environ)
        except InvalidConfig as error:
            raise InvalidConfig(f"{config}: {error}") from None
        check_draft_target(args.draft)  # before anything is registered
        jobs = [(d, _files(d, config.parent)) for d in parsed.models if isinstance(d, SwapDraft)]
        tally = Tally(sum(len(files) for _d, files in jobs) + len(parsed.models) - len(jobs))
        for skip in (m for m in parsed.models if isinstance(m, SwapSkip)):
            tally.say(f"models.{skip.model_id}", "skipped", skip.why)
        drafted = []
        for draft, files in jobs:
            for name, path in files:
                add = _adder(path, name)
                import_one(registry, tally, name, expected_files(path), add)
            if all(_registered(registry, name) for name, _path in files):
                drafted.append(draft)
            else:
                print(
                    one_line(
                        f"models.{draft.model_id}: not drafted: its files are not all registered"
                    )
                )
        for note in parsed.notes:
            print(one_line(note))
        print(tally.summary())
        return _write_draft(args.draft, registry, drafted, config)

    return with_registry(args, run)


def check_draft_target(target: Path) -> None:
    """Raise `InvalidConfig` (``--draft: ...``) unless a draft can be written at ``target``:
    its folder exists, and the name is free or an existing regular file (never overwritten:
    the import says so)."""
    if not target.parent.is_dir():
        raise InvalidConfig(
            f"--draft: {target}: its folder {target.parent} is missing (nothing registered)"
        )
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise InvalidConfig(
            f"--draft: {target}: is a link or not a regular file (nothing registered)"
        )


def _files(draft: SwapDraft, base: Path) -> list[tuple[str, Path]]:
    """Each file the draft's server reads, with the registry name it gets."""
    role = draft.role
    files = [(role, draft.model)]
    if draft.draft_model is not None:
        files.append((f"{role}.draft", draft.draft_model))
    if draft.mmproj is not None:
        files.append((f"{role}.mmproj", draft.mmproj))
    files += [(f"{role}.lora{i}", path) for i, path in enumerate(draft.lora)]
    return [(name, base / Path(path).expanduser()) for name, path in files]


def _adder(path: Path, name: str) -> Any:
    def add(registry: ModelRegistry) -> Any:
        _check_gguf_path(path)
        return registry.add(
            path, name=name, on_progress=HashProgress(stream=__import__("sys").stderr)
        )

    return add


def _check_gguf_path(path: Path) -> None:
    """Refuse what llama-server cannot read as a model file (``-m``, ``--mmproj``,
    ``--lora``, ``-md`` all take one GGUF file): a folder, or a file not named ``.gguf``.

    Raises:
        InvalidConfig: saying what it is and that llama-server reads GGUF files only.
    """
    if path.is_dir():
        raise InvalidConfig(
            f"path: {path} is a folder, and llama-server reads one GGUF file: not imported "
            "(an mlx folder is registered with models add, and served by mlx_lm.server)"
        )
    if path.suffix.lower() != ".gguf":
        raise InvalidConfig(
            f"path: {path} is not a .gguf file, and llama-server reads GGUF files only: "
            "not imported"
        )


def _registered(registry: ModelRegistry, name: str) -> bool:
    return any(m.name == name for m in registry.list())


def _write_draft(
    target: Path, registry: ModelRegistry, drafts: list[SwapDraft], config: Path
) -> int:
    if not drafts:
        print("no instance drafted")
        return 0
    text = draft_text(registry, drafts, config)
    try:
        run_config_from_toml(text, target.parent, f"{target}: ")
    except InvalidConfig as error:  # a draft we made that the run file refuses: say so
        print(f"the draft is not a valid run file, not written: {error}")
        return 1
    if target.exists():
        same = target.is_file() and target.read_text(errors="replace") == text
        print(
            f"{target}: {'unchanged' if same else 'exists, not overwritten (name another --draft)'}"
        )
        return 0
    try:
        _write_private(target, text)
    except FileExistsError:
        print(f"{target}: exists, not overwritten (name another --draft)")
        return 0
    except OSError as error:
        raise InvalidConfig(f"--draft: {target}: cannot write it: {error.strerror}") from None
    print(f"drafted {len(drafts)} instance{'s' if len(drafts) != 1 else ''} in {target}")
    return 0


def _write_private(target: Path, text: str) -> None:
    """Write ``text`` to the new file ``target``, mode 0600 (a draft may name paths and
    settings that are no one else's business), never through a link planted there.

    Raises:
        FileExistsError: something is already at ``target``.
        OSError: the folder cannot be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # whatever the umask
        handle.write(text)


def draft_text(registry: ModelRegistry, drafts: list[SwapDraft], config: Path) -> str:
    """The drafted run file: ``[managed]``, then an ``[[instances]]`` entry per draft."""
    document = tomlkit.document()
    document.add(
        tomlkit.comment(
            f"Drafted by `inferactors models import llama-swap {printable(str(config))}`."
        )
    )
    document.add(tomlkit.comment("Check every value, then: inferactors run <this file>"))
    managed = tomlkit.table()
    managed.add("registry", str(registry.path))
    managed.add("data_root", "state")
    programs = tomlkit.inline_table()
    for draft in drafts:
        programs.setdefault(draft.flavor.id, draft.program)
    managed.add("serve_programs", programs)
    document.add("managed", managed)
    instances = tomlkit.aot()
    taken: set[int] = set()
    for draft in drafts:
        instances.append(_instance(draft, taken))
    document.add("instances", instances)
    return tomlkit.dumps(document)


def _instance(draft: SwapDraft, taken: set[int]) -> Any:
    entry = tomlkit.table()
    left = list(draft.not_carried)
    port = draft.port if draft.port is not None else draft.flavor.default_port
    if port in taken:
        moved = max(taken) + 1
        left.append(f"--port {port}: another drafted instance has it; given {moved}")
        port = moved
    taken.add(port)
    for line in left:
        entry.add(tomlkit.comment(f"not carried: {printable(line)}"))
    entry.add("mode", "managed")
    entry.add("role", draft.role)
    entry.add("runtime", draft.flavor.id)
    entry.add("model", draft.role)
    serve = tomlkit.inline_table()
    serve.add("port", port)
    for key, value in (("host", draft.host), ("ctx", draft.ctx), ("kv_quant", draft.kv_quant)):
        if value is not None:
            serve.add(key, value)
    if draft.draft_model is not None:
        serve.add("draft_model", f"{draft.role}.draft")
    if draft.mmproj is not None:
        serve.add("mmproj", f"{draft.role}.mmproj")
    if draft.lora:
        serve.add("lora", [f"{draft.role}.lora{i}" for i in range(len(draft.lora))])
    if draft.extra_args:
        serve.add("extra_args", list(draft.extra_args))
    entry.add("serve", serve)
    for line in left:
        print(one_line(f"models.{draft.model_id}: not carried: {line}"))
    return entry
