"""The pin check at every spawn.

Before each spawn of a managed server (first start, start after stop, supervised restart,
and the first start after a reload), `pin_for_spawn` asks the registry to check the plan's
model (and draft) from descriptors opened beneath the model root (`ModelRegistry.pin`: the
cheap stat check, a full BLAKE3 re-hash when the stamp changed) and turns the launch into
one that hands the server those very descriptors (`pin_launch`); a model the server reads
as a directory is handed a view of its pinned files only (`build_views`), built afresh in
the instance directory. It blocks (a re-hash reads every byte), so the spawn worker runs it
through ``Edges.file_work``, a worker thread.

A tampered file gives a `PinHold`: the spawn is refused with `PinMismatch`, and the instance
is held down until the registry's manifest of that model changes (the model was
re-registered) or the instance is reloaded (a new actor). While held, a start is refused
again without reading the model.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import attrs

from ..._edges.bundle import FileWork
from ..._errors import PinMismatch
from ..._flavor import InferFlavor
from ..._models.hashing import ProgressFn
from ..._models.manifest import ModelManifest
from ..._models.pinned_view import build_views
from ..._models.pinning import ClosedOnExit, PinnedModel
from ..._models.registry import ModelRegistry
from ..._policy.admission import Plan
from ..._policy.launch import Launch
from ..._policy.pin_launch import (
    FD_DIR,
    VIEWS,
    PinnedFds,
    pin_launch,
    served_as_directory,
    view_path,
)


@attrs.frozen
class PinHold:
    """Why an instance is held down: ``manifest``'s files failed their pins (``error``)."""

    manifest: ModelManifest
    error: PinMismatch

    def still_holds(self, current: ModelManifest) -> bool:
        """Whether ``current`` (the registry's entry now) is the manifest that failed."""
        return current == self.manifest


@attrs.define(eq=False)
class PinnedLaunch(ClosedOnExit):
    """A launch that names verified descriptors, and those descriptors (and the views that
    link to them, ``views``), open.

    Kept open for the server's whole life, so `changed` can re-check the very inodes it
    serves, and closed once it is reaped (or the spawn failed); as a context manager it
    closes itself.
    """

    launch: Launch
    models: tuple[PinnedModel, ...]
    views: tuple[int, ...] = ()

    def changed(self) -> PinHold | None:
        """The hold for a model whose verified file changed since the check (an in-place
        write to the inode the server maps), else None. ``fstat`` of each held descriptor
        against its verified stamp (`PinnedModel.changed`): microseconds, no hashing."""
        for model in self.models:
            failure = model.changed()
            if failure is not None:
                name = model.manifest.name
                message = f"model {name} is not ready: {failure.reason}"
                return PinHold(
                    model.manifest, PinMismatch(message, name, failure.file, failure.reason)
                )
        return None

    def close(self) -> None:
        """Close every descriptor (safe to call twice)."""
        for model in self.models:
            model.close()
        views, self.views = self.views, ()
        for fd in views:
            os.close(fd)


async def pin_spawn(
    file_work: FileWork,
    registry: ModelRegistry | None,
    plan: Plan,
    held: PinHold | None,
    on_progress: ProgressFn | None = None,
) -> PinnedLaunch | PinHold:
    """`pin_for_spawn` through ``file_work`` (a worker thread: a re-hash may take seconds);
    the launch as planned when there is no registry (a bare actor, nothing to pin)."""
    launch = plan.launch
    assert launch is not None, "only managed process plans are pinned"
    if registry is None:
        return PinnedLaunch(launch, ())
    return await file_work(partial(pin_for_spawn, registry, plan, held, on_progress))


def pin_for_spawn(
    registry: ModelRegistry,
    plan: Plan,
    held: PinHold | None,
    on_progress: ProgressFn | None = None,
) -> PinnedLaunch | PinHold:
    """Check the plan's model and draft and pin them into its launch (blocking).

    Args:
        registry: the runtime's registry (its recorded stamps make the check cheap).
        plan: a managed process plan (``launch`` and ``model`` set).
        held: the instance's hold, if any: while the registry still has that manifest, the
            hold is returned again and nothing is read.
        on_progress: called after each chunk of a file re-hashed (from this thread).

    Returns:
        The pinned launch (the caller closes it), or the hold that refuses the spawn.

    Raises:
        UnknownModel: the model was removed from the registry.
        ModelNotReady: a file or the root is missing or unreadable (not tampering).
    """
    launch, model = plan.launch, plan.model
    assert launch is not None, "only managed process plans are pinned"
    assert model is not None, "a managed process plan has a model"
    slots = pinned_slots(plan)
    pinned = PinnedLaunch(launch, ())
    try:
        for _slot, _flag, name in slots:
            manifest = registry.get(name)
            if held is not None and held.still_holds(manifest):
                pinned.close()
                return held
            try:
                pinned.models += (registry.pin(manifest, on_progress=on_progress),)
            except PinMismatch as error:
                pinned.close()
                return PinHold(manifest, error)
        fds = _with_views(pinned, launch, plan, [slot for slot, _flag, _name in slots])
        draft = fds[1] if plan.draft is not None else None
        extras = [(flag, f) for (_s, flag, _n), f in zip(slots, fds, strict=True) if flag]
        pinned.launch = pin_launch(launch, plan.spec.runtime, fds[0], draft, extras=extras)
    except BaseException:
        pinned.close()
        raise
    return pinned


def pinned_slots(plan: Plan) -> list[tuple[str, str, str]]:
    """Each model the plan's server reads, as ``(view slot, flag, registry name)``: the
    model and draft (flag ``""``: `pin_launch` places them itself), then the projector
    (``--mmproj``) and each LoRA adapter (``--lora``, or mlx_lm.server's
    ``--adapter-path``)."""
    assert plan.model is not None, "a managed process plan has a model"
    slots = [("model", "", plan.model.name)]
    if plan.draft is not None:
        slots.append(("draft", "", plan.draft.name))
    if plan.mmproj is not None:
        slots.append(("mmproj", "--mmproj", plan.mmproj.name))
    flag = "--adapter-path" if plan.spec.runtime is InferFlavor.MLX_LM else "--lora"
    slots += [(f"lora{i}", flag, adapter.name) for i, adapter in enumerate(plan.lora)]
    return slots


def _with_views(
    pinned: PinnedLaunch, launch: Launch, plan: Plan, slots: list[str]
) -> list[PinnedFds]:
    """Each model's descriptors as numbers; a model read as a directory also gets its view
    (``pinned/<slot>/<root name>`` in the instance directory, ``slot`` being ``model``,
    ``draft``, ``mmproj`` or ``loraN``), whose descriptor ``pinned`` then holds."""
    flavor = plan.spec.runtime
    viewed = [
        (slot, model)
        for slot, model in zip(slots, pinned.models, strict=True)
        if served_as_directory(flavor, len(model.manifest.shards))
    ]
    if viewed:
        cwd = launch.cwd
        views = [
            (slot, view_path(cwd, slot, Path(m.manifest.root).name).name, dict(m.fds))
            for slot, m in viewed
        ]
        pinned.views = build_views(cwd, views, fd_dir=FD_DIR, base=VIEWS)
    view_of = {id(model): fd for (_slot, model), fd in zip(viewed, pinned.views, strict=True)}
    numbers = []
    for model in pinned.models:
        shards = tuple(zip((s.path for s in model.manifest.shards), model.shard_fds(), strict=True))
        view = view_of.get(id(model))
        linked = tuple(model.fds.values()) if view is not None else ()
        numbers.append(PinnedFds(shards, view, linked))
    return numbers
