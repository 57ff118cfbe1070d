"""A tiny deterministic llama model directory that the real mlx_lm.server loads offline.

`write_tiny_mlx` writes four files into a directory, about 520 KB in all, in well under a
second:

- ``config.json``: a Hugging Face llama config: 2 layers, hidden size 64, 4 attention heads
  (2 KV heads), feed-forward 128, untied output matrix, 4096 positions;
- ``tokenizer.json``: a byte-level BPE tokenizer built by hand, not trained (so no trainer
  can change it): 3 specials (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``), the 256
  byte symbols, then for each of the 60 words of `TINY_WORDS` every prefix of ``Ġword``
  with the merges that build it. Any UTF-8 text tokenizes;
- ``tokenizer_config.json``: a fast tokenizer with ``<|im_end|>`` as EOS and a ChatML chat
  template;
- ``model.safetensors``: float32 random weights from a seeded generator, with header
  metadata ``format: mlx`` (so the registry detects the mlx format).

Only the rows of the output matrix that belong to whole ``Ġword`` pieces are non-zero, so
the model only ever generates words (`` two`` and the like) and practically never EOS:
``finish_reason`` is ``length``. Every byte is the same on every run: the directory is
written on the spot, never downloaded, and mlx_lm.server serves it on Linux on the CPU.

``numpy``, ``safetensors`` and ``tokenizers`` (the ``testing-models`` extra; no mlx needed)
are imported only when the function runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

_HIDDEN = 64
_LAYERS = 2
_HEADS = 4
_KV_HEADS = 2
_FFN = 128
_POSITIONS = 4096
_HEAD_DIM = _HIDDEN // _HEADS
_SEED = 20240605
_SCALE = 0.02
_OUTPUT_SCALE = 0.2

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Ids 0, 1 and 2: padding, turn start and end of turn (the EOS token)."""

_WORD_TEXT = (
    "two cat dog sun tree rain word blue green small large river stone house light night "
    "water cloud bread apple chair table paper music quiet happy early later north south "
    "winter summer garden window bridge market letter silver golden simple gentle yellow "
    "purple orange violet candle forest island valley meadow harbor castle planet rocket "
    "engine circle square copper velvet thunder"
)
TINY_WORDS = tuple(_WORD_TEXT.split())
"""The 60 distinct words the model can say; each gets the piece ``Ġword``."""

_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_MISSING_DEPS = (
    "write_tiny_mlx needs numpy, safetensors and tokenizers:"
    " pip install -e '.[testing-models]' (from a clone)"
)


@attrs.frozen
class TinyVocabulary:
    """The hand-built byte-level BPE vocabulary of the tiny mlx model.

    Attributes:
        pieces: every piece, in id order (``pieces[i]`` has id ``i``).
        merges: the BPE merges, in priority order, each a pair of existing pieces.
        word_ids: ids of the whole ``Ġword`` pieces, the only ones the model can emit.
    """

    pieces: tuple[str, ...]
    merges: tuple[tuple[str, str], ...]
    word_ids: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of pieces: the model's ``vocab_size``."""
        return len(self.pieces)

    @property
    def eos_id(self) -> int:
        """Id of ``<|im_end|>``."""
        return self.pieces.index("<|im_end|>")


def byte_symbols() -> tuple[str, ...]:
    """The 256 symbols a byte-level BPE writes for bytes 0 to 255, in byte order.

    Printable Latin-1 bytes (``!`` to ``~``, ``¡`` to ``¬``, ``®`` to ``ÿ``) stand for
    themselves; each other byte, in increasing order, takes the next code point from U+0100
    (so the space, 0x20, is ``Ġ``). This is the mapping GPT-2 introduced and that the
    ``tokenizers`` ByteLevel pre-tokenizer uses.
    """
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    symbols: list[str] = []
    spare = 0x100
    for byte in range(256):
        if byte in printable:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(spare))
            spare += 1
    return tuple(symbols)


def tiny_vocabulary() -> TinyVocabulary:
    """The tiny mlx model's vocabulary (pure; see `TinyVocabulary`).

    Ids 0 to 2 are `SPECIAL_TOKENS`, 3 to 258 the `byte_symbols`, then, word by word, each
    new prefix ``Ġw``, ``Ġwo``, ... of ``Ġword``, built by the merge of the previous prefix
    with the next letter.
    """
    pieces = [*SPECIAL_TOKENS, *byte_symbols()]
    known = set(pieces)
    merges: list[tuple[str, str]] = []
    word_ids: list[int] = []
    space = byte_symbols()[0x20]
    for word in TINY_WORDS:
        for end in range(1, len(word) + 1):
            piece = space + word[:end]
            if piece not in known:
                known.add(piece)
                pieces.append(piece)
                merges.append((space + word[: end - 1], word[end - 1]))
        word_ids.append(pieces.index(space + word))
    return TinyVocabulary(tuple(pieces), tuple(merges), tuple(word_ids))


def write_tiny_mlx(directory: Path) -> Path:
    """Write the tiny model (see the module docstring) into ``directory``; return it.

    Creates ``directory`` and its parents if missing and overwrites the four files; other
    files in it are left alone. Takes about 0.2 s.

    Raises:
        ImportError: numpy, safetensors or tokenizers is missing; the message names the
            extra to install. Nothing is written then.
    """
    try:
        import numpy as np
        import tokenizers
        from safetensors.numpy import save_file
    except ImportError as error:
        raise ImportError(_MISSING_DEPS) from error
    vocabulary = tiny_vocabulary()
    directory.mkdir(parents=True, exist_ok=True)
    _tokenizer(tokenizers, vocabulary).save(str(directory / "tokenizer.json"))
    _write_json(directory / "tokenizer_config.json", _tokenizer_config())
    _write_json(directory / "config.json", _model_config(vocabulary))
    tensors = _tensors(np, vocabulary)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "mlx"})
    for written in directory.iterdir():
        written.chmod(0o644)  # readable by the unprivileged user a managed server runs as
    return directory


def _tokenizer(tokenizers: Any, vocabulary: TinyVocabulary) -> Any:
    ids = {piece: index for index, piece in enumerate(vocabulary.pieces)}
    model = tokenizers.models.BPE(vocab=ids, merges=list(vocabulary.merges))
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def _tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": _POSITIONS,
        "chat_template": _CHAT_TEMPLATE,
    }


def _model_config(vocabulary: TinyVocabulary) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocabulary.size,
        "hidden_size": _HIDDEN,
        "num_hidden_layers": _LAYERS,
        "num_attention_heads": _HEADS,
        "num_key_value_heads": _KV_HEADS,
        "intermediate_size": _FFN,
        "max_position_embeddings": _POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "eos_token_id": vocabulary.eos_id,
    }


def _write_json(path: Path, document: dict[str, object]) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _tensors(np: Any, vocabulary: TinyVocabulary) -> dict[str, Any]:
    """Every weight, drawn in a fixed order from one seeded generator (fixes the bytes)."""
    rng = np.random.default_rng(_SEED)

    def noise(rows: int, cols: int, scale: float = _SCALE) -> Any:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def ones() -> Any:
        return np.ones(_HIDDEN, dtype=np.float32)

    kv_width = _KV_HEADS * _HEAD_DIM
    tensors = {"model.embed_tokens.weight": noise(vocabulary.size, _HIDDEN)}
    for layer in range(_LAYERS):
        prefix = f"model.layers.{layer}."
        tensors |= {
            prefix + "input_layernorm.weight": ones(),
            prefix + "self_attn.q_proj.weight": noise(_HIDDEN, _HIDDEN),
            prefix + "self_attn.k_proj.weight": noise(kv_width, _HIDDEN),
            prefix + "self_attn.v_proj.weight": noise(kv_width, _HIDDEN),
            prefix + "self_attn.o_proj.weight": noise(_HIDDEN, _HIDDEN),
            prefix + "post_attention_layernorm.weight": ones(),
            prefix + "mlp.gate_proj.weight": noise(_FFN, _HIDDEN),
            prefix + "mlp.up_proj.weight": noise(_FFN, _HIDDEN),
            prefix + "mlp.down_proj.weight": noise(_HIDDEN, _FFN),
        }
    tensors["model.norm.weight"] = ones()
    output = np.zeros((vocabulary.size, _HIDDEN), dtype=np.float32)
    words = list(vocabulary.word_ids)
    output[words] = noise(len(words), _HIDDEN, _OUTPUT_SCALE)
    tensors["lm_head.weight"] = output
    return tensors
