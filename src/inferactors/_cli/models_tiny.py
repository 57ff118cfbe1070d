"""``inferactors models add-tiny``: write the tiny test model and register it, so the
README's examples have a model to serve on a fresh clone (nothing downloaded)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import UnknownModel
from .models_common import with_registry

if TYPE_CHECKING:
    from .._models.registry import ModelRegistry


def add_tiny_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``models add-tiny [PATH] [--name NAME]`` to the ``models`` subcommands."""
    tiny = commands.add_parser(
        "add-tiny",
        parents=[common],
        help="write the tiny test model (a 510 KiB GGUF llama-server loads) and register it",
    )
    tiny.add_argument(
        "path", type=Path, nargs="?", default=Path("tiny.gguf"),
        help="where to write it (default: ./tiny.gguf; the same bytes on every run)",
    )  # fmt: skip
    tiny.add_argument("--name", default="tiny", help="its registry name (default: tiny)")
    tiny.set_defaults(func=handle_add_tiny)


def handle_add_tiny(args: argparse.Namespace) -> int:
    """``models add-tiny [PATH] [--name NAME]``: write the model (gguf and numpy, the
    ``gguf`` extra, are needed), then register it as ``models add`` does; a name already
    registered is registered again (its file was just rewritten with the same bytes)."""
    from ..testing._tiny_models import write_tiny_gguf

    def run(registry: ModelRegistry) -> int:
        path = write_tiny_gguf(args.path)
        try:
            registry.remove(args.name)
        except UnknownModel:
            pass
        manifest = registry.add(path, name=args.name)
        where = registry.path if registry.path is not None else "memory"
        print(f"wrote {path} ({path.stat().st_size} bytes) and registered it as {manifest.name}")
        print(f"registry: {where}")
        return 0

    return with_registry(args, run)
