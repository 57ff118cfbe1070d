"""Inference server flavors and model formats (pure; no I/O)."""

from __future__ import annotations

import enum


class ModelFormat(enum.StrEnum):
    """On-disk format of a registered model."""

    GGUF = "gguf"
    MLX = "mlx"
    SAFETENSORS = "safetensors"
    OLLAMA = "ollama"


class InferFlavor(enum.StrEnum):
    """Which inference server a runtime drives; the value is the flavor's id."""

    LLAMACPP = "infer.llamacpp"
    MLX_LM = "infer.mlx-lm"
    OLLAMA = "infer.ollama"

    @property
    def id(self) -> str:
        """The flavor id, for example ``"infer.llamacpp"``."""
        return self.value

    @property
    def capability(self) -> str:
        """The capability name, for example ``"runtime.infer.llamacpp"``."""
        return f"runtime.{self.value}"

    @property
    def default_port(self) -> int:
        """The server's default port: 8090 (llama.cpp), 8081 (mlx-lm), 11434 (Ollama)."""
        return _DEFAULT_PORTS[self]

    @property
    def formats(self) -> tuple[ModelFormat, ...]:
        """Model formats the flavor advertises as capabilities."""
        return _FORMATS[self]

    @property
    def loadable_formats(self) -> tuple[ModelFormat, ...]:
        """Formats a managed instance of this flavor accepts (narrower for Ollama)."""
        return _LOADABLE[self]


_DEFAULT_PORTS = {InferFlavor.LLAMACPP: 8090, InferFlavor.MLX_LM: 8081, InferFlavor.OLLAMA: 11434}
_FORMATS = {
    InferFlavor.LLAMACPP: (ModelFormat.GGUF,),
    InferFlavor.MLX_LM: (ModelFormat.MLX, ModelFormat.SAFETENSORS),
    InferFlavor.OLLAMA: (ModelFormat.OLLAMA, ModelFormat.GGUF),
}
_LOADABLE = {
    InferFlavor.LLAMACPP: (ModelFormat.GGUF,),
    InferFlavor.MLX_LM: (ModelFormat.MLX, ModelFormat.SAFETENSORS),
    InferFlavor.OLLAMA: (ModelFormat.OLLAMA,),
}
