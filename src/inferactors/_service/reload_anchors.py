"""A reload's trust anchors: the anchor files read again, swapped into every open runtime's
registry, and the instances left running whose models no longer verify against them.

The anchors are read when the run file is (a file that is missing or holds no key refuses
the reload, and nothing changed). Once the reload is sure to go ahead, `use_anchors` gives
them to every registry still open: a key taken out of an anchor file, or an anchor removed,
is no longer trusted from then on, with no restart. An instance the reload leaves running
(its effective settings unchanged: anchors never reach a server's process) has each model
its server reads checked again (`unchanged_tampered`); one that no longer verifies is
refused like a changed byte, so its server is held down as ``tampered`` (its held pin
re-checks its signature within a second, ``_models/pinning.py``) and the reload says so,
succeeding all the same.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from .._actors.registry_open import trust_anchors
from .._config.runfile import RunConfig
from .._config.spec import InferenceSpec
from .._errors import InferactorsError, InvalidConfig, PinMismatch, one_line
from .._flavor import InferFlavor
from .._models.anchors import TrustAnchors
from .._models.registry import ModelRegistry
from .hosts import RuntimeHost
from .members import Member, signer_of


async def read_anchors(config: RunConfig) -> TrustAnchors:
    """The trust anchors ``config``'s ``[managed]`` names, their files read now.

    Raises:
        InvalidConfig: an anchor file that is missing, oversized or holds no key or
            certificate of its kind, or anchors without the ``signing`` extra.
    """
    if config.managed is None:
        return TrustAnchors()
    managed = config.managed.managed_config(InferFlavor.LLAMACPP)  # the same for every flavor
    try:
        return await trio.to_thread.run_sync(trust_anchors, managed)
    except InvalidConfig:
        raise
    except InferactorsError as error:  # Unsupported: the signing extra is missing
        raise InvalidConfig(str(error)) from None


def use_anchors(hosts: Iterable[RuntimeHost], anchors: TrustAnchors) -> bool:
    """Give ``anchors`` to every open runtime's registry; whether any had other ones."""
    changed = False
    for host in hosts:
        registry = host.runtime.registry
        if registry is not None and registry.use_anchors(anchors):
            changed = True
    return changed


async def unchanged_tampered(members: Iterable[Member]) -> tuple[tuple[str, str], ...]:
    """Check again each model the servers of ``members`` read (model, draft, projector,
    adapters) under the anchors in force; the ``(name, reason)`` of each member one of whose
    models no longer verifies (sorted). Each member's ``signed_by`` is read again."""
    tampered = []
    for member in members:
        registry = member.runtime.registry
        if registry is None:
            continue
        spec = member.placement.entry.spec
        for model in models_read(spec):
            why = await trio.to_thread.run_sync(_refusal, registry, model)
            if why is not None:
                tampered.append((member.name, why))
                break
        member.signed_by = signer_of(member.runtime, spec.model)
    return tuple(sorted(tampered))


def models_read(spec: InferenceSpec) -> tuple[str, ...]:
    """The registry names of the models a managed server of ``spec`` reads."""
    serve = spec.serve
    names = (spec.model, serve.draft_model, serve.mmproj, *serve.lora)
    return tuple(name for name in names if name is not None)


def _refusal(registry: ModelRegistry, model: str) -> str | None:
    """Why ``model`` is refused as tampered now, or None (it passes, is missing or is no
    longer registered: those are found at the next spawn, as ever)."""
    try:
        registry.resolve(model)
    except PinMismatch as error:
        return one_line(str(error))
    except InferactorsError:
        return None
    return None
