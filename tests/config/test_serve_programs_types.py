"""``InferConfig.all_flavors(serve_programs=...)`` takes a `str` path as a newcomer writes it,
and refuses anything else naming the field, rather than failing later at load with an
AttributeError."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors import ControlMode, InferConfig, InferFlavor, InvalidConfig, ManagedConfig

MANAGED = ManagedConfig(registry=Path("/tmp/models.json"), data_root=Path("/tmp/state"))


def test_a_str_program_is_taken_as_a_path() -> None:
    config = InferConfig.all_flavors(
        MANAGED, serve_programs={InferFlavor.LLAMACPP: "/opt/llama/llama-server"}
    )
    assert config.serve_programs == ((InferFlavor.LLAMACPP, Path("/opt/llama/llama-server")),)
    managed = config.for_instance(InferFlavor.LLAMACPP, ControlMode.MANAGED).managed
    assert managed is not None
    assert managed.serve_program == Path("/opt/llama/llama-server")


def test_a_program_of_another_type_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidConfig, match=r"^serve_programs\[infer\.llamacpp\]: expected a path"):
        InferConfig.all_flavors(MANAGED, serve_programs={InferFlavor.LLAMACPP: 42})  # type: ignore[dict-item]
