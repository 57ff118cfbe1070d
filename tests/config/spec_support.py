"""What the spec tests share: the flavors by short name and a spec to vary."""

from __future__ import annotations

from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._flavor import InferFlavor

LLAMA = InferFlavor.LLAMACPP
MLX = InferFlavor.MLX_LM
OLLAMA = InferFlavor.OLLAMA


def spec(runtime: InferFlavor = LLAMA, **serve: object) -> InferenceSpec:
    return InferenceSpec(role="planner", runtime=runtime, model="qwen", serve=ServeArgs(**serve))  # type: ignore[arg-type]  # test helper forwards keyword fields
