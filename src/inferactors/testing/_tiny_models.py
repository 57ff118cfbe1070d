"""A tiny deterministic llama GGUF that the real llama-server loads in well under a second.

`write_tiny_gguf` writes a 522,336-byte random-weight model: 2 layers, embedding 64, 4 heads
(2 KV heads), feed-forward 128, context 4096, all F32, and a 420-piece SentencePiece vocabulary
(3 specials, 256 byte-fallback pieces, printable ASCII, ``▁`` and 66 ``▁word`` pieces) so any
UTF-8 prompt tokenizes. Only the ``▁word`` rows of the output matrix are non-zero, so the model
only ever generates `` word word ...`` and never EOS (``finish_reason`` is always ``length``).
The bytes are identical on every run: SHA-256 ``768c01cc...``.

``gguf`` and ``numpy`` (the ``testing-models`` extra) are imported only when the function
runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_EMBED = 64
_LAYERS = 2
_HEADS = 4
_KV_HEADS = 2
_FFN = 128
_CONTEXT = 4096
_HEAD_DIM = _EMBED // _HEADS

_WORD_TEXT = (
    "the of and to in is it that was for on are with as his they be at one have this from "
    "or had by word but what some can out other were all there when up use your how said "
    "each which do their time will way about many then them write would like so these her "
    "long make thing see him two look more"
)
_WORDS = tuple(_WORD_TEXT.split())
"""The 66 distinct words of the ``▁word`` pieces, in vocabulary order."""

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_NAME = "tiny-random-llama"
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6  # gguf.TokenType values
_MISSING_DEPS = (
    "write_tiny_gguf needs gguf and numpy: pip install -e '.[testing-models]' (from a clone)"
)


def tiny_vocabulary() -> tuple[list[str], list[int]]:
    """The tiny model's pieces and their GGUF token types, in id order.

    Ids 0 to 2 are ``<unk> <s> </s>``, then ``<0x00>`` to ``<0xFF>`` (byte fallback), the
    printable ASCII characters ``!`` to ``~``, ``▁``, and ``▁the``, ``▁of``, ... (the words,
    all distinct). Types: 1 normal, 2 unknown, 3 control, 6 byte.
    """
    chars = [chr(code) for code in range(33, 127)] + ["\u2581"]
    words = ["\u2581" + word for word in _WORDS]
    pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *chars, *words]
    types = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256 + [_NORMAL] * (len(chars) + len(words))
    return pieces, types


def write_tiny_gguf(path: Path, *, seed: int = 0, name: str = _NAME) -> Path:
    """Write the tiny llama GGUF (see the module docstring) to ``path`` and return ``path``.

    ``seed`` and ``name`` make another tiny model of the same shape with other weights and
    ``general.name`` (a second model for swap tests); the defaults write the model of the
    module docstring, byte for byte. Creates missing parent directories and overwrites an
    existing file. Takes about 0.4 s.

    Raises:
        ImportError: ``gguf`` or ``numpy`` is missing (the ``testing-models`` extra).
    """
    try:
        import gguf
        import numpy as np
    except ImportError as error:
        raise ImportError(_MISSING_DEPS) from error
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    pieces, types = tiny_vocabulary()
    _write_metadata(writer, gguf, pieces, types, name)
    _write_tensors(writer, np, vocab=len(pieces), first_word=len(pieces) - len(_WORDS), seed=seed)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_metadata(
    writer: Any, gguf: Any, pieces: list[str], types: list[int], name: str = _NAME
) -> None:
    writer.add_name(name)
    writer.add_context_length(_CONTEXT)
    writer.add_embedding_length(_EMBED)
    writer.add_block_count(_LAYERS)
    writer.add_feed_forward_length(_FFN)
    writer.add_head_count(_HEADS)
    writer.add_head_count_kv(_KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(_HEAD_DIM)
    writer.add_vocab_size(len(pieces))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores([0.0] * len(pieces))
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(_CHAT_TEMPLATE)


def _write_tensors(writer: Any, np: Any, *, vocab: int, first_word: int, seed: int = 0) -> None:
    """Add every tensor; the draw order from the seeded generator fixes the bytes."""
    rng = np.random.default_rng(seed)

    def noise(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(count: int) -> Any:
        return np.ones(count, dtype=np.float32)

    writer.add_tensor("token_embd.weight", noise(vocab, _EMBED))
    writer.add_tensor("output_norm.weight", ones(_EMBED))
    output = noise(vocab, _EMBED) * 10
    output[:first_word] = 0  # only "▁word" pieces get logits: " word word ...", never EOS
    writer.add_tensor("output.weight", output)
    kv_width = _KV_HEADS * _HEAD_DIM
    for layer in range(_LAYERS):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", ones(_EMBED))
        writer.add_tensor(prefix + "attn_q.weight", noise(_EMBED, _EMBED))
        writer.add_tensor(prefix + "attn_k.weight", noise(kv_width, _EMBED))
        writer.add_tensor(prefix + "attn_v.weight", noise(kv_width, _EMBED))
        writer.add_tensor(prefix + "attn_output.weight", noise(_EMBED, _EMBED))
        writer.add_tensor(prefix + "ffn_norm.weight", ones(_EMBED))
        writer.add_tensor(prefix + "ffn_gate.weight", noise(_FFN, _EMBED))
        writer.add_tensor(prefix + "ffn_up.weight", noise(_FFN, _EMBED))
        writer.add_tensor(prefix + "ffn_down.weight", noise(_EMBED, _FFN))
