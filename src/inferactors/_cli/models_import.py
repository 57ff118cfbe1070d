"""``inferactors models import``: register the models already on this machine.

Three sources, none downloaded from: Ollama's model store (``ollama [STORE]``), a Hugging
Face cache folder (``hf-cache [CACHE]``) and a llama-swap config (``llama-swap CONFIG``,
whose models are registered and drafted as run-file instances, ``llama_swap_draft.py``).
Each found model gets one line, ``[3/7] qwen3:0.6b: registered (gguf, 1 file, 4.7 GiB)``,
and large files their hashing progress on stderr; a model registered before under the same
name from the same files is ``already registered`` (an import can be run again), one whose
name another model holds is skipped, and every skip says why. The last line sums it up.
Exit status: 0 once the source was read (skips included), 2 for a source that is not one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .._errors import InvalidConfig, one_line
from .._models.import_hf import HfModel, find_hf_models
from .._models.import_ollama import OllamaModel, Skipped, find_ollama_models, ollama_manifest
from .._models.manifest import ModelManifest
from .._models.registry import ModelRegistry
from .import_tally import Tally, expected_files, import_one, summary
from .llama_swap_draft import import_llama_swap
from .models_common import HashProgress, with_registry


def add_import_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``models import ollama|hf-cache|llama-swap`` to the ``models`` subcommands."""
    parser = commands.add_parser("import", help="register models already here (no download)")
    sources = parser.add_subparsers(dest="import_source", metavar="SOURCE", required=True)
    ollama = sources.add_parser("ollama", parents=[common], help="Ollama's model store")
    ollama.add_argument(
        "store", type=Path, nargs="?", default=None,
        help="its models directory (default: $OLLAMA_MODELS, else ~/.ollama/models)",
    )  # fmt: skip
    ollama.add_argument(
        "--update", action="store_true",
        help="re-register a model whose Ollama tag was pulled again (new weights); without "
        "it such a model is skipped, naming both digests",
    )  # fmt: skip
    ollama.set_defaults(func=handle_import_ollama)
    hf = sources.add_parser("hf-cache", parents=[common], help="a Hugging Face cache folder")
    hf.add_argument(
        "cache", type=Path, nargs="?", default=None,
        help="the cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)",
    )  # fmt: skip
    hf.set_defaults(func=handle_import_hf)
    swap = sources.add_parser(
        "llama-swap", parents=[common], help="a llama-swap config: models and drafted instances"
    )
    swap.add_argument("swap_config", type=Path, metavar="CONFIG", help="llama-swap's config.yaml")
    swap.add_argument(
        "--draft", type=Path, default=Path("llama-swap.run.toml"), metavar="RUN_FILE",
        help="where to write the drafted run file (default: ./llama-swap.run.toml; never "
        "overwritten)",
    )  # fmt: skip
    swap.set_defaults(func=import_llama_swap)


def handle_import_ollama(args: argparse.Namespace) -> int:
    """``models import ollama [STORE]``."""
    store = args.store or Path(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models")

    def run(registry: ModelRegistry) -> int:
        found = list(find_ollama_models(store.expanduser()))
        tally = Tally(len(found))
        for item in found:
            if isinstance(item, Skipped):
                tally.say(item.what, "skipped", item.why)
                continue
            _import_ollama_one(registry, tally, item, update=args.update)
            if item.left_out:
                layers = "layers" if len(item.left_out) > 1 else "layer"
                print(
                    f"{item.name}: not carried: its {' and '.join(item.left_out)} {layers} "
                    "(only the weights are registered; a server run from them goes without it)"
                )
        print(tally.summary())
        return 0

    return with_registry(args, run)


def handle_import_hf(args: argparse.Namespace) -> int:
    """``models import hf-cache [CACHE]``."""
    cache = args.cache or _hf_cache()

    def run(registry: ModelRegistry) -> int:
        found = list(find_hf_models(cache.expanduser()))
        tally = Tally(len(found))
        for item in found:
            if isinstance(item, Skipped):
                tally.say(item.what, "skipped", item.why)
                continue
            stale = _earlier_snapshot(registry, item)
            if stale is not None:
                tally.say(item.name, "skipped", stale)
                continue
            add = hf_add(registry, item)
            import_one(registry, tally, item.name, expected_files(item.path), add)
            if item.note is not None:
                print(one_line(f"{item.name}: {item.note}"))
        print(tally.summary())
        return 0

    return with_registry(args, run)


def _import_ollama_one(
    registry: ModelRegistry, tally: Tally, found: OllamaModel, *, update: bool
) -> None:
    """Import ``found``; one registered from an earlier pull of the same tag (other weights)
    is replaced only with ``update``, else skipped naming both digests: never kept stale
    in silence, never replaced without consent."""
    current = next((m for m in registry.list() if m.name == found.name), None)
    if current is None or not _earlier_pull(current, found):
        import_one(registry, tally, found.name, _ollama_files(found), _ollama_add(found))
        return
    old, new = current.shards[0].path, found.blob.name
    if not update:
        why = (
            f"Ollama's {found.tag} is now {new}, registered is {old} (an earlier pull): "
            "kept as registered; --update registers the new weights"
        )
        tally.say(found.name, "skipped", why)
        return
    try:
        manifest = ollama_manifest(found, HashProgress(stream=sys.stderr))
        registry.replace_manifest(manifest, replacing=current)
    except (InvalidConfig, OSError) as error:
        why = str(error) if isinstance(error, InvalidConfig) else f"cannot read: {error}"
        tally.say(found.name, "skipped", why)
        return
    tally.say(found.name, "updated", f"{summary(manifest)}, was {old}")


def _earlier_pull(current: ModelManifest, found: OllamaModel) -> bool:
    """Whether ``current`` was registered from the same Ollama tag as ``found`` when it
    named other weights."""
    return (
        current.source.ollama_tag == found.tag
        and len(current.shards) == 1
        and current.shards[0].path != found.blob.name
    )


def _earlier_snapshot(registry: ModelRegistry, found: HfModel) -> str | None:
    """Why ``found`` is not imported when its name holds an earlier snapshot of the same
    repository (refs/main moved on since): both revisions named, the entry kept."""
    current = next((m for m in registry.list() if m.name == found.name), None)
    if current is None or current.source.hf_repo != found.source.hf_repo:
        return None
    old, new = current.source.hf_revision, found.source.hf_revision
    if old is None or new is None or old == new:
        return None
    return (
        f"{found.source.hf_repo} is now at {new[:8]}, registered is {old[:8]} (an earlier "
        "snapshot): kept as registered; models remove it, then import again"
    )


def _ollama_files(found: OllamaModel) -> tuple[str, dict[str, int]]:
    return str(found.blob.parent), {found.blob.name: found.size}


def _ollama_add(found: OllamaModel) -> Callable[[ModelRegistry], ModelManifest]:
    def add(registry: ModelRegistry) -> ModelManifest:
        return registry.add_manifest(ollama_manifest(found, HashProgress(stream=sys.stderr)))

    return add


def hf_add(registry: ModelRegistry, found: HfModel) -> Callable[[ModelRegistry], ModelManifest]:
    """Register ``found`` (a GGUF file or a folder), with its signature when trust anchors
    are given to check it; a signature left unchecked is said on stderr."""
    signature = found.signature
    if signature is not None and not registry.anchors:
        print(
            f"note: {one_line(str(signature))} not checked: no trust anchor given (--trust-key, "
            f"--trust-root or --config); registering {one_line(found.name)} unsigned",
            file=sys.stderr,
        )
        signature = None

    def add(registry: ModelRegistry) -> ModelManifest:
        progress = HashProgress(stream=sys.stderr)
        return registry.add(
            found.path,
            name=found.name,
            source=found.source,
            on_progress=progress,
            signature=signature,
        )

    return add


def _hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path("~/.cache/huggingface/hub")
