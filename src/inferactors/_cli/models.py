"""The ``inferactors models`` commands: add, add-ollama, list, verify, remove, sign, import.

Each command reads the registry file named by ``--registry`` (default: `default_registry_path`,
or the run file's ``[managed] registry`` with ``--config``) and is a plain function
``handler(args) -> exit code`` set with ``set_defaults(func=...)``. Signatures are verified
against the trust anchors named by ``--trust-key`` and ``--trust-root`` (public keys and root
certificates, each named after its file's stem) or the run file's
``[[managed.trust_anchors]]`` (``--config``). Errors print ``inferactors: error: <message>``
on stderr and exit 2 for bad input (a malformed name, path, signature, anchor, registry file
or unknown model) or 1 for anything else (a tampered model, an I/O failure, a missing
extra). Hashing a file over 64 MiB shows its progress on stderr. ``sign`` is
``models_sign.py``, ``import`` ``models_import.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .._errors import InvalidConfig
from .._flavor import ModelFormat
from .._models.manifest import ModelManifest, ModelSource
from .._models.registry import ModelRegistry
from .._models.signed_add import find_signature
from .._models.signing_rules import describe
from .models_common import PROGRESS_THRESHOLD_BYTES as PROGRESS_THRESHOLD_BYTES
from .models_common import REGISTRY_ENV as REGISTRY_ENV
from .models_common import HashProgress as HashProgress
from .models_common import common_options, with_registry
from .models_common import default_registry_path as default_registry_path
from .models_common import format_size as format_size
from .models_import import add_import_commands
from .models_sign import add_sign_command
from .models_tiny import add_tiny_command


def register_models_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``models`` and its subcommands to a CLI's subparsers.

    Every leaf sets ``func`` to its handler: ``args.func(args)`` runs it and returns the exit
    code.
    """
    common = common_options()
    models = subparsers.add_parser("models", help="register and check local models")
    commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    _add_add(commands, common)
    _add_add_ollama(commands, common)
    add_sign_command(commands)
    add_tiny_command(commands, common)
    add_import_commands(commands, common)
    listing = commands.add_parser("list", parents=[common], help="list registered models")
    listing.set_defaults(func=handle_list)
    verify = commands.add_parser("verify", parents=[common], help="re-hash models in full")
    verify.add_argument("name", nargs="?", default=None, help="one model (default: all)")
    verify.set_defaults(func=handle_verify)
    remove = commands.add_parser("remove", parents=[common], help="forget a model (keeps files)")
    remove.add_argument("name")
    remove.set_defaults(func=handle_remove)


def _add_add(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = commands.add_parser(
        "add", parents=[common], help="register a .gguf file or a model directory (no copy)"
    )
    add.add_argument("path", type=Path, help="a .gguf file or a model directory")
    add.add_argument("--name", required=True, help="the model's registry name")
    add.add_argument("--hf-repo", default=None, help="Hugging Face repository it came from")
    add.add_argument("--hf-revision", default=None, help="Hugging Face revision it came from")
    formats = [f.value for f in ModelFormat if f is not ModelFormat.OLLAMA]
    add.add_argument("--format", choices=formats, default=None, help="override detection")
    add.add_argument(
        "--signature",
        type=Path,
        default=None,
        metavar="SIG",
        help="its detached OpenSSF Model Signing signature, in the model's folder "
        "(default: model.sig, or FILE.sig for a .gguf file, when one lies beside it)",
    )
    add.add_argument(
        "--unsigned",
        action="store_true",
        help="register it without the signature found beside it",
    )
    add.set_defaults(func=handle_add)


def _add_add_ollama(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = commands.add_parser("add-ollama", parents=[common], help="register an Ollama tag")
    add.add_argument("--name", required=True, help="the model's registry name")
    add.add_argument("--tag", required=True, help="the tag Ollama knows it by, e.g. qwen3:0.6b")
    add.set_defaults(func=handle_add_ollama)


def handle_add(args: argparse.Namespace) -> int:
    """``models add PATH --name NAME [--hf-repo R] [--hf-revision V] [--format F]``."""

    def run(registry: ModelRegistry) -> int:
        source = ModelSource(hf_repo=args.hf_repo, hf_revision=args.hf_revision)
        fmt = ModelFormat(args.format) if args.format else None
        signature, found = _signature_for(args, registry)
        progress = HashProgress(stream=sys.stderr)
        try:
            manifest = registry.add(
                args.path,
                name=args.name,
                source=source,
                format=fmt,
                on_progress=progress,
                signature=signature,
            )
        except InvalidConfig as error:
            if found is None:
                raise
            raise InvalidConfig(f"{error} (found beside the model; --unsigned skips it)") from None
        print(f"registered {manifest.name}: {_summary(manifest)}")
        signer = describe(manifest, None)
        if signer is not None:
            print(f"signed by {signer}")
        return 0

    return with_registry(args, run)


def _signature_for(
    args: argparse.Namespace, registry: ModelRegistry
) -> tuple[Path | None, Path | None]:
    """The signature to register with (``--signature``, else one found beside the model
    unless ``--unsigned``), and the one found, if that is where it came from. A signature
    found with no trust anchor to check it is named on stderr and left out."""
    if args.signature is not None or args.unsigned:
        return args.signature, None
    found = find_signature(args.path)
    if found is None:
        return None, None
    if not registry.anchors:
        print(
            f"note: {found} not checked: no trust anchor given (--trust-key, --trust-root or "
            "--config); registering the model unsigned",
            file=sys.stderr,
        )
        return None, None
    return found, found


def handle_add_ollama(args: argparse.Namespace) -> int:
    """``models add-ollama --name NAME --tag TAG``."""

    def run(registry: ModelRegistry) -> int:
        manifest = registry.add_ollama(args.name, args.tag)
        print(f"registered {manifest.name}: ollama tag {manifest.source.ollama_tag}")
        return 0

    return with_registry(args, run)


def handle_list(args: argparse.Namespace) -> int:
    """``models list``: a table of name, format, files, total size and root."""

    def run(registry: ModelRegistry) -> int:
        manifests = registry.list()
        if not manifests:
            print(f"no models registered in {registry.path}")
            return 0
        print(format_table(manifests))
        return 0

    return with_registry(args, run)


def handle_verify(args: argparse.Namespace) -> int:
    """``models verify [NAME]``: full re-hash; exit 1 when any model fails."""

    def run(registry: ModelRegistry) -> int:
        checks = registry.verify(args.name, on_progress=HashProgress(stream=sys.stderr))
        if not checks:
            print(f"no models registered in {registry.path}")
        for check in checks:
            print(f"{'ok' if check.ok else 'FAILED':<7} {check.name}: {check.reason}")
        return 0 if all(check.ok for check in checks) else 1

    return with_registry(args, run)


def handle_remove(args: argparse.Namespace) -> int:
    """``models remove NAME``: forget the model; its files stay where they are."""

    def run(registry: ModelRegistry) -> int:
        manifest = registry.remove(args.name)
        print(f"removed {manifest.name} (its files are untouched)")
        return 0

    return with_registry(args, run)


def format_table(manifests: Sequence[ModelManifest]) -> str:
    """A left-aligned table: NAME, FORMAT, FILES, SIZE (binary units), SIGNED BY (the anchor
    and signer registered, ``-`` for none) and ROOT."""
    rows = [("NAME", "FORMAT", "FILES", "SIZE", "SIGNED BY", "ROOT")]
    for m in manifests:
        files = m.shards + m.tokenizer
        root = m.root or f"(ollama tag {m.source.ollama_tag})"
        size = format_size(sum(f.size for f in files)) if files else "-"
        signer = describe(m, None) or "-"
        rows.append((m.name, m.format.value, str(len(files)), size, signer, root))
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
        lines.append("  ".join([*cells, row[5]]))
    return "\n".join(lines)


def _summary(manifest: ModelManifest) -> str:
    files = manifest.shards + manifest.tokenizer
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    size = format_size(sum(f.size for f in files))
    return f"{manifest.format.value}, {count}, {size}, root {manifest.root}"
