"""The declared size of a llama-server's KV cache, from the model's GGUF header (pure).

llama-server allocates its KV cache once, at load: for every layer, a K and a V row per
cell, ``n_head_kv * key_length`` (and ``value_length``) elements each, in the cache type
(``-ctk``/``-ctv``: f16 unless ``serve.kv_quant`` says otherwise). How many cells:

- ``-c N`` (``serve.ctx``), or the model's trained context when unset;
- with ``-np P`` (parallel slots) each slot gets ``N / P`` cells rounded up to a multiple
  of 256, in a stream of its own: ``P * pad256(N / P)`` cells in all;
- without ``-np`` the server picks 4 slots sharing one unified cache of ``N`` cells
  (rounded up to 256 here, an upper bound).

So the figure is an upper bound for models with sliding-window layers (their cache is
smaller), and it counts only what the server itself logs as its KV buffer: the real
server on the tiny model logs ``llama_kv_cache: size = 0.50 MiB (1024 cells, 2 layers,
2/2 seqs)`` for ``-c 2048 -np 2``, which this computes exactly (``tests/policy``).

The header is read by ``_edges/gguf_header.py`` (the ``gguf`` package) into a `GgufShape`.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._config.allowlist import flag_positions
from .._config.spec import InferenceSpec

PAD_CELLS = 256
"""llama.cpp rounds a slot's cells up to a multiple of this."""
AUTO_SLOTS = 4
"""Parallel slots llama-server picks when ``-np`` is not given (one unified cache)."""

CACHE_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}
"""The KV cache types llama-server's ``-ctk``/``-ctv`` take: (elements per block, bytes
per block), ggml's block sizes."""


@attrs.frozen
class GgufShape:
    """What the KV cache size depends on, from a GGUF header.

    Attributes:
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ...).
        n_layer: ``<arch>.block_count``.
        n_ctx_train: ``<arch>.context_length``.
        n_embd: ``<arch>.embedding_length``.
        n_head: ``<arch>.attention.head_count``.
        n_head_kv: ``<arch>.attention.head_count_kv`` per layer (one value for all layers
            when the header gives one; ``n_head`` when it gives none).
        key_length: ``<arch>.attention.key_length`` (default ``n_embd / n_head``).
        value_length: ``<arch>.attention.value_length`` (default ``key_length``).
        n_vocab: the vocabulary size (the token list's length).
    """

    architecture: str
    n_layer: int
    n_ctx_train: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]
    key_length: int
    value_length: int
    n_vocab: int = 0

    def heads_kv(self, layer: int) -> int:
        """KV heads of ``layer``."""
        if not self.n_head_kv:
            return self.n_head
        return self.n_head_kv[layer] if len(self.n_head_kv) > 1 else self.n_head_kv[0]


@attrs.frozen
class KvSettings:
    """How a spec sizes its server's KV cache.

    Attributes:
        ctx: ``-c`` (None: the model's trained context).
        slots: ``-np`` (None: llama-server's automatic 4 slots, unified cache).
        cache_type: ``-ctk``/``-ctv`` (``f16`` by default).
    """

    ctx: int | None = None
    slots: int | None = None
    cache_type: str = "f16"


def kv_settings(spec: InferenceSpec) -> KvSettings:
    """The KV settings ``spec`` launches its llama-server with (``serve.ctx``,
    ``serve.kv_quant``, ``-np`` in ``serve.extra_args``; the spec is valid)."""
    slots: int | None = None
    args = spec.serve.extra_args
    for index, flag in flag_positions(spec.runtime, args):
        if flag in ("-np", "--parallel") and index + 1 < len(args):
            slots = int(args[index + 1])
    cache = (spec.serve.kv_quant or "f16").lower()
    return KvSettings(spec.serve.ctx, slots if slots and slots > 0 else None, cache)


def kv_cells(shape: GgufShape, settings: KvSettings) -> int:
    """Cells in the whole cache, every slot's stream together (module docstring)."""
    ctx = settings.ctx or shape.n_ctx_train
    if settings.slots is None:
        return _pad(max(ctx, 1))
    per_slot = _pad(max(1, ctx // settings.slots))
    return per_slot * settings.slots


def kv_bytes(shape: GgufShape, settings: KvSettings) -> int | None:
    """The KV cache's bytes, None for a cache type this does not know."""
    sizes = CACHE_TYPES.get(settings.cache_type)
    if sizes is None:
        return None
    per_block, block_bytes = sizes
    cells = kv_cells(shape, settings)
    per_cell = 0
    for layer in range(shape.n_layer):
        heads = shape.heads_kv(layer)
        elements = heads * (shape.key_length + shape.value_length)
        per_cell += -(-elements // per_block) * block_bytes
    return per_cell * cells


def shape_from_fields(fields: dict[str, object], n_vocab: int = 0) -> GgufShape | None:
    """A `GgufShape` from a header's key/value fields (scalars, or a sequence for
    ``head_count_kv``); None when a field the size needs is missing or not a number."""
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        return None
    numbers = {
        name: _int(fields.get(f"{arch}.{name}"))
        for name in ("block_count", "context_length", "embedding_length")
    }
    heads = _int(fields.get(f"{arch}.attention.head_count"))
    if heads is None or None in numbers.values() or heads <= 0:
        return None
    n_layer, n_ctx, n_embd = (numbers[k] or 0 for k in numbers)
    kv_heads = _ints(fields.get(f"{arch}.attention.head_count_kv"))
    key = _int(fields.get(f"{arch}.attention.key_length")) or n_embd // heads
    value = _int(fields.get(f"{arch}.attention.value_length")) or key
    return GgufShape(arch, n_layer, n_ctx, n_embd, heads, kv_heads, key, value, n_vocab)


def _pad(cells: int) -> int:
    return -(-cells // PAD_CELLS) * PAD_CELLS


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _ints(value: object) -> tuple[int, ...]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        found = tuple(v for v in (_int(item) for item in value) if v is not None)
        return found if len(found) == len(value) else ()
    single = _int(value)
    return () if single is None else (single,)
