"""llama-server's own buffer-size log lines, read into the engine's measured figure (pure).

While it loads, llama-server (with ``-lv 4``: its default verbosity, 3, leaves these out)
logs what it allocates; the real server on the tiny model says::

    load_tensors:   CPU_Mapped model buffer size =     0.49 MiB
    llama_context:        CPU  output buffer size =     0.00 MiB
    llama_kv_cache:        CPU KV buffer size =     0.50 MiB
    llama_kv_cache: size =    0.50 MiB (  1024 cells,   2 layers,  2/2 seqs), K (f16): ...
    sched_reserve:        CPU compute buffer size =     2.01 MiB

each behind llama.cpp's log prefix (``0.00.030.011 I``). The engine figure is the sum of
the model, KV, output and compute buffers of every device (the ``size =`` summary repeats
the KV buffers and is not added again). Ollama reads the same lines to correct its own
estimate; we keep them apart from the process RSS (``_policy/residency.py``).
"""

from __future__ import annotations

import enum
import re

import attrs

from .startup_fault import LLAMA_PREFIX

MiB = 1 << 20

_BUFFER = re.compile(
    r"^(?P<who>load_tensors|llama_context|llama_kv_cache|sched_reserve|llama_model_load"
    r"|llama_new_context_with_model):\s+(?P<device>\S+)\s+(?P<kind>model|KV|output|compute)"
    r" buffer size =\s+(?P<mib>[0-9]+(?:\.[0-9]+)?) MiB\s*$"
)


class BufferKind(enum.Enum):
    """What a buffer holds."""

    MODEL = "model"
    KV = "KV"
    OUTPUT = "output"
    COMPUTE = "compute"


@attrs.frozen
class Buffer:
    """One buffer the server logged: on ``device`` (``CPU``, ``CPU_Mapped``, ``CUDA0``),
    holding ``kind``, ``bytes`` (from MiB with two decimals: within 5 kB)."""

    device: str
    kind: BufferKind
    bytes: int


def buffer_of(line: str) -> Buffer | None:
    """The buffer a server line reports, None for any other line."""
    match = _BUFFER.match(LLAMA_PREFIX.sub("", line.strip()))
    if match is None:
        return None
    size = round(float(match["mib"]) * MiB)
    return Buffer(match["device"], BufferKind(match["kind"]), size)


@attrs.frozen
class EngineBuffers:
    """The buffers one server process logged, in order."""

    buffers: tuple[Buffer, ...] = ()

    def add(self, line: str) -> EngineBuffers:
        """With ``line``'s buffer, if it reports one."""
        buffer = buffer_of(line)
        return self if buffer is None else EngineBuffers((*self.buffers, buffer))

    def total(self, kind: BufferKind | None = None) -> int:
        """Bytes of every buffer (of ``kind``)."""
        return sum(b.bytes for b in self.buffers if kind is None or b.kind is kind)

    def complete(self) -> bool:
        """Whether the compute buffers are in (the last lines a load logs)."""
        return any(b.kind is BufferKind.COMPUTE for b in self.buffers)
