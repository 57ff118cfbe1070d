"""An instance's declared and estimated memory, from its registry entries and GGUF headers.

*Declared* (`_policy/residency.py`): the weight shards' exact bytes as the registry pins
them, plus the KV cache computed from the model's GGUF header at the spec's context,
slots and cache type (``_policy/kv_cache.py``). Where no header can be read (an mlx or
Ollama model, ``gguf`` not installed, an adopted server) the spec's ``memory`` figures
stand in: ``weights_bytes`` for weights the registry does not pin, ``kv_budget_bytes``
for the KV cache.

*Estimated*: the operator's ``estimated_bytes`` when given; else the projector's and the
draft model's shards (and the draft's KV cache), the compute and output buffers
(`compute_estimate`), and the server program itself (`PROGRAM_BYTES`).

Reading the registry and the headers is file I/O, run in a worker thread.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from .._config.residency import InstanceResidency
from .._config.spec import InferenceSpec
from .._edges.gguf_header import read_gguf_shape
from .._errors import ModelError
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from .._policy.kv_cache import GgufShape, KvSettings, kv_bytes, kv_settings
from .._policy.residency import Footprint

MiB = 1 << 20

PROGRAM_BYTES = {
    InferFlavor.LLAMACPP: 16 * MiB,
    InferFlavor.MLX_LM: 400 * MiB,
    InferFlavor.OLLAMA: 0,
}
"""The server program's own resident memory, beside the model: the real llama-server of
this project's build holds 17.6 MB RSS on the tiny model, of which 3.0 MiB are the
buffers it logs; mlx_lm.server is a Python process with mlx loaded. Ollama's daemon is
another program (its memory counts as other programs' unless adopted)."""

UBATCH = 512
"""llama-server's default physical batch (``-ub``), which sizes its compute buffer."""


def compute_estimate(shape: GgufShape, slots: int | None) -> int:
    """llama-server's compute and output buffers, estimated: ``UBATCH * (n_vocab + 8 *
    n_embd) * 4`` bytes for the graph (the logits and the widest activations of one
    batch) plus one float row of logits per slot. The real server on the tiny model
    logs 2.01 MiB of compute buffer, against 1.9 MB estimated."""
    graph = UBATCH * (shape.n_vocab + 8 * shape.n_embd) * 4
    output = shape.n_vocab * 4 * (slots or 4)
    return graph + output


@attrs.frozen
class Figures:
    """What `footprint_of` found: the ``footprint`` and ``notes`` on what is missing."""

    footprint: Footprint
    notes: tuple[str, ...] = ()


async def footprint_of(
    spec: InferenceSpec, registry: ModelRegistry | None, setting: InstanceResidency
) -> Figures:
    """The declared and estimated figures of an instance of ``spec`` (module docstring);
    never raises: what cannot be read is said in ``notes`` and counted from the spec."""
    return await trio.to_thread.run_sync(_footprint_of, spec, registry, setting)


def _footprint_of(
    spec: InferenceSpec, registry: ModelRegistry | None, setting: InstanceResidency
) -> Figures:
    notes: list[str] = []
    weights, first = _shards(registry, spec.model, notes)
    if weights is None:
        weights = spec.memory.weights_bytes
    kv, shape = None, None
    settings = kv_settings(spec)
    if first is not None and spec.runtime is InferFlavor.LLAMACPP:
        shape, kv = _kv(first, settings, notes)
    if kv is None:
        kv = spec.memory.kv_budget_bytes
    if setting.estimated_bytes is not None:
        estimated = setting.estimated_bytes
    else:
        estimated = _estimate(spec, registry, shape, settings, notes)
    footprint = Footprint(
        declared=weights + kv,
        estimated=estimated,
        devices=setting.accelerators,
        kv=kv,
    )
    return Figures(footprint, tuple(notes))


def _estimate(
    spec: InferenceSpec,
    registry: ModelRegistry | None,
    shape: GgufShape | None,
    settings: KvSettings,
    notes: list[str],
) -> int:
    estimated = PROGRAM_BYTES[spec.runtime]
    if shape is not None:
        estimated += compute_estimate(shape, settings.slots)
    projector, _ = _shards(registry, spec.serve.mmproj, notes)
    draft, draft_first = _shards(registry, spec.serve.draft_model, notes)
    estimated += (projector or 0) + (draft or 0)
    if draft_first is not None:
        _, draft_kv = _kv(draft_first, settings, notes)
        estimated += draft_kv or 0
    return estimated


def _shards(
    registry: ModelRegistry | None, name: str | None, notes: list[str]
) -> tuple[int | None, Path | None]:
    """The pinned bytes of the model ``name``'s shards and its first shard's path."""
    if registry is None or name is None:
        return None, None
    try:
        manifest = registry.get(name)
    except ModelError as error:
        notes.append(f"{name}: {error}")
        return None, None
    if not manifest.shards:
        return None, None
    first = Path(manifest.root) / manifest.shards[0].path
    return sum(shard.size for shard in manifest.shards), first


def _kv(path: Path, settings: KvSettings, notes: list[str]) -> tuple[GgufShape | None, int | None]:
    read = read_gguf_shape(path)
    if read.shape is None:
        notes.append(f"KV cache not computed: {read.why}")
        return None, None
    size = kv_bytes(read.shape, settings)
    if size is None:
        notes.append(f"KV cache not computed: unknown cache type {settings.cache_type!r}")
    return read.shape, size
