"""Reading what a GGUF file's header says of the model's shape, with the ``gguf`` package.

The residency ledger sizes a llama-server's KV cache from the header
(``_policy/kv_cache.py``); this edge reads the few fields it needs, never the tensors.
``gguf`` (with numpy) is an optional dependency (``pip install 'inferactors[gguf]'``):
without it, the KV cache is not counted in the declared figure and the status says so.
Synchronous file I/O: async callers run `read_gguf_shape` in a thread.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from .._policy.kv_cache import GgufShape, shape_from_fields

NO_GGUF = "the gguf package is not installed (pip install 'inferactors[gguf]')"
"""Why a header was not read when ``gguf`` is missing."""

_ARCH_KEYS = (
    "block_count",
    "context_length",
    "embedding_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
)


@attrs.frozen
class HeaderRead:
    """What reading a header gave: the ``shape``, or ``why`` it could not be read."""

    shape: GgufShape | None
    why: str | None = None


def read_gguf_shape(path: Path) -> HeaderRead:
    """The shape in the header of the GGUF file at ``path`` (memory-mapped; the tensors
    are not read). Never raises: a missing ``gguf``, an unreadable or malformed file, or a
    header without the fields a KV cache needs is said in ``why``."""
    try:
        import gguf
    except ImportError:
        return HeaderRead(None, NO_GGUF)
    try:
        reader = gguf.GGUFReader(str(path))
        fields = reader.fields
        arch = fields["general.architecture"].contents()
        wanted = {"general.architecture": arch}
        for key in _ARCH_KEYS:
            field = fields.get(f"{arch}.{key}")
            if field is not None:
                wanted[f"{arch}.{key}"] = field.contents()
        tokens = fields.get("tokenizer.ggml.tokens")
        n_vocab = len(tokens.data) if tokens is not None else 0
    except Exception as error:  # a file the reader cannot parse: say why, never crash
        return HeaderRead(None, f"cannot read the GGUF header of {path}: {error}")
    shape = shape_from_fields(wanted, n_vocab)
    if shape is None:
        return HeaderRead(None, f"the GGUF header of {path} lacks the model's shape")
    return HeaderRead(shape)
