"""Admission's model resolution: every model a spec names (``model``, ``serve.draft_model``,
``serve.mmproj``, ``serve.lora``) resolved and verified by the registry (its BLAKE3 pins,
and the signers the spec requires in ``signed_by``), in a worker thread, and checked to be
of a format the spec's flavor loads. A model that fails is refused naming its field
(`AdmissionRefused`). Split from ``admission``, which calls these for every managed plan
(and later pins the same models at every spawn, ``instance/pins.py``)."""

from __future__ import annotations

from functools import partial

import trio

from .._config.spec import InferenceSpec
from .._errors import AdmissionRefused, ModelError
from .._models.manifest import ResolvedModel
from .._models.registry import ModelRegistry
from .._policy.launch import check_format


async def registered_model(spec: InferenceSpec, registry: ModelRegistry) -> ResolvedModel:
    """The spec's model, verified by the registry and of a format its flavor loads."""
    if spec.model is None:
        raise AdmissionRefused(
            "managed mode needs a model: set the spec's model to a registry name"
        )
    model = await _resolve(registry, spec.model, spec.signed_by)
    check_format(spec.runtime, model)
    return model


async def draft_model(spec: InferenceSpec, registry: ModelRegistry) -> ResolvedModel:
    """The spec's ``serve.draft_model`` (which must be set), verified like the model."""
    assert spec.serve.draft_model is not None
    draft = await _resolve(registry, spec.serve.draft_model, spec.signed_by)
    check_format(spec.runtime, draft)
    return draft


async def _resolve(
    registry: ModelRegistry, name: str, signed_by: tuple[str, ...] = ()
) -> ResolvedModel:
    """The verified model ``name``, signed by one of ``signed_by`` when that is not empty
    (the spec's requirement: checked here, recorded by the load once it succeeds)."""
    try:
        return await trio.to_thread.run_sync(partial(registry.resolve, name, signed_by=signed_by))
    except ModelError as error:
        raise AdmissionRefused(f"model {name}: {error}") from error


async def resolve_extras(
    spec: InferenceSpec, registry: ModelRegistry
) -> tuple[ResolvedModel | None, tuple[ResolvedModel, ...]]:
    """The verified projector (or None) and LoRA adapters the spec names.

    Raises:
        AdmissionRefused: a name the registry does not know, a file that fails its pin, or
            a format the flavor cannot load (``serve.mmproj tiny-proj: ...``).
    """
    mmproj = None
    if spec.serve.mmproj is not None:
        mmproj = await _verified(spec, registry, "serve.mmproj", spec.serve.mmproj)
    lora = []
    for index, name in enumerate(spec.serve.lora):
        lora.append(await _verified(spec, registry, f"serve.lora[{index}]", name))
    return mmproj, tuple(lora)


async def _verified(
    spec: InferenceSpec, registry: ModelRegistry, field: str, name: str
) -> ResolvedModel:
    try:
        resolve = partial(registry.resolve, name, signed_by=spec.signed_by)
        model = await trio.to_thread.run_sync(resolve)
    except ModelError as error:
        raise AdmissionRefused(f"{field} {name}: {error}") from error
    check_format(spec.runtime, model)
    return model
