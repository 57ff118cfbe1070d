"""The KV cache's declared size from a GGUF header, and llama-server's own buffer lines.

The lines are the real llama-server's (this build, ``-lv 4``) on the tiny model with
``-c 2048 -np 2``; its ``llama_kv_cache: size = 0.50 MiB`` is what `kv_bytes` computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.gguf_header import read_gguf_shape
from inferactors._flavor import InferFlavor
from inferactors._policy.buffer_lines import BufferKind, EngineBuffers, buffer_of
from inferactors._policy.kv_cache import GgufShape, KvSettings, kv_bytes, kv_cells, kv_settings
from inferactors.testing import write_tiny_gguf

MiB = 1 << 20

REAL_LINES = """\
0.00.029.474 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
0.00.030.011 I load_tensors:   CPU_Mapped model buffer size =     0.49 MiB
0.00.030.393 I llama_context:        CPU  output buffer size =     0.00 MiB
0.00.030.439 I llama_kv_cache:        CPU KV buffer size =     0.50 MiB
0.00.030.669 I llama_kv_cache: size =    0.50 MiB (  1024 cells,   2 layers,  2/2 seqs), \
K (f16):    0.25 MiB, V (f16):    0.25 MiB
0.00.042.366 I sched_reserve:        CPU compute buffer size =     2.01 MiB
0.00.042.382 I sched_reserve: graph: nodes = 72, splits = 1, input objects = 4, input tensors = 6
""".splitlines()


@pytest.fixture(scope="module")
def tiny_shape(tmp_path_factory: pytest.TempPathFactory) -> GgufShape:
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    read = read_gguf_shape(path)
    assert read.why is None
    assert read.shape is not None
    return read.shape


def test_the_header_gives_the_tiny_models_shape(tiny_shape: GgufShape) -> None:
    assert tiny_shape == GgufShape(
        architecture="llama",
        n_layer=2,
        n_ctx_train=4096,
        n_embd=64,
        n_head=4,
        n_head_kv=(2,),
        key_length=16,
        value_length=16,
        n_vocab=420,
    )


def test_kv_bytes_match_what_the_real_server_logged(tiny_shape: GgufShape) -> None:
    settings = KvSettings(ctx=2048, slots=2)
    assert kv_cells(tiny_shape, settings) == 2048  # 2 streams of 1024 cells
    assert kv_bytes(tiny_shape, settings) == round(0.50 * MiB)
    logged = EngineBuffers()
    for line in REAL_LINES:
        logged = logged.add(line)
    assert logged.total(BufferKind.KV) == kv_bytes(tiny_shape, settings)


def test_slots_round_up_to_256_cells_each_and_quantised_caches_shrink(
    tiny_shape: GgufShape,
) -> None:
    assert kv_cells(tiny_shape, KvSettings(ctx=1000, slots=3)) == 3 * 512
    assert kv_cells(tiny_shape, KvSettings(ctx=None, slots=None)) == 4096  # trained, unified
    f16 = kv_bytes(tiny_shape, KvSettings(ctx=4096, slots=1))
    q8 = kv_bytes(tiny_shape, KvSettings(ctx=4096, slots=1, cache_type="q8_0"))
    assert f16 is not None
    assert q8 is not None
    assert q8 == f16 * 34 // 64  # 34 bytes per 32 elements against 2 bytes each
    assert kv_bytes(tiny_shape, KvSettings(cache_type="nonsense")) is None


def test_kv_settings_read_the_spec_as_the_launch_does() -> None:
    spec = InferenceSpec(
        "chat",
        InferFlavor.LLAMACPP,
        "tiny",
        ServeArgs(ctx=8192, kv_quant="q8_0", extra_args=("--threads", "2", "-np", "4")),
    )
    assert kv_settings(spec) == KvSettings(ctx=8192, slots=4, cache_type="q8_0")
    bare = InferenceSpec("chat", InferFlavor.LLAMACPP, "tiny")
    assert kv_settings(bare) == KvSettings()


def test_the_engine_figure_sums_every_buffer_once() -> None:
    logged = EngineBuffers()
    for line in REAL_LINES:
        logged = logged.add(line)
    kinds = [b.kind for b in logged.buffers]
    assert kinds == [BufferKind.MODEL, BufferKind.OUTPUT, BufferKind.KV, BufferKind.COMPUTE]
    assert logged.total() == round(0.49 * MiB) + 0 + round(0.50 * MiB) + round(2.01 * MiB)
    assert logged.complete()
    assert buffer_of("llama_kv_cache: size =    0.50 MiB (  1024 cells, ...)") is None
    assert buffer_of("0.00.001.000 I srv  llama_server: model loaded") is None


def test_a_broken_file_is_said_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    read = read_gguf_shape(bad)
    assert read.shape is None
    assert read.why is not None
    assert str(bad) in read.why
    missing = read_gguf_shape(tmp_path / "absent.gguf")
    assert missing.shape is None
    assert missing.why is not None
