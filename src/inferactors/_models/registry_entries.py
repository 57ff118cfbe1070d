"""The registry's entries: which manifest each model name stands for, as the file keeps it.

`RegistryEntries` is `registry.ModelRegistry`'s catalogue: the named `ModelManifest`s, kept in
the registry file (or only in memory). Names are unique: adding a name already registered, or
replacing or removing one that is not, is refused naming it. Nothing here looks at a model's
files; the registry checks them (``model_checks.py``).

An entries object may be shared by threads, and one file by processes: every change holds a
thread lock and an exclusive ``flock`` on ``<registry>.lock``, is made to the file as re-read
then, and is saved atomically (temporary file, fsync, ``os.replace``), so two processes adding
models do not lose each other's entries and a crash leaves the old file. A read re-reads the
file only when its stamp changed on disk. The file I/O itself (saving, locking, stamping,
reading) is in `registry_file.py`; its text format in `manifest_io.py`. All synchronous.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import attrs

from .._errors import InvalidConfig, UnknownModel, shown
from .hashing import FileStamp
from .manifest import ModelManifest
from .manifest_io import registry_to_text
from .registry_file import file_lock, read_registry, registry_stamp, write_atomic


@attrs.define(eq=False)
class RegistryEntries:
    """The named manifests of one registry, backed by the file at ``path`` (None: in memory).

    Raises (every method that reads the file):
        InvalidConfig: the file is malformed (`registry_file.read_registry`).
        BackendError: the file cannot be read, locked or saved.
    """

    path: Path | None
    _models: dict[str, ModelManifest] = attrs.field(factory=dict)
    _file_stamp: FileStamp | None = None
    _lock: threading.RLock = attrs.field(factory=threading.RLock)

    def refresh(self) -> None:
        """Re-read the file if it changed on disk since it was last read or saved (a missing
        file is an empty registry)."""
        if self.path is None:
            return
        stamp = registry_stamp(self.path)
        if stamp == self._file_stamp:
            return
        self._models = {m.name: m for m in read_registry(self.path)} if stamp else {}
        self._file_stamp = stamp

    def listed(self) -> tuple[ModelManifest, ...]:
        """Every registered manifest, sorted by name."""
        models = self._current()
        return tuple(models[name] for name in sorted(models))

    def get(self, name: str) -> ModelManifest:
        """The manifest registered as ``name``.

        Raises:
            UnknownModel: no model has that name.
        """
        manifest = self._current().get(name)
        return manifest if manifest is not None else _unknown(name)

    def refuse_taken(self, name: str) -> None:
        """Nothing when ``name`` is free now (the file is checked again as it is written).

        Raises:
            InvalidConfig: a model named ``name`` is already registered.
        """
        _refuse_taken(self._current(), name)

    def insert(self, manifest: ModelManifest) -> None:
        """Register ``manifest`` under its name, in one write of the file.

        Raises:
            InvalidConfig: its name is already registered (nothing is written).
        """
        self._update(lambda models: _insert(models, manifest))

    def replace(self, manifest: ModelManifest, *, replacing: ModelManifest) -> None:
        """Register ``manifest`` in place of ``replacing`` (same name), in one write.

        Raises:
            InvalidConfig: another name, or the registered entry is no longer ``replacing``
                (changed meanwhile: nothing is written).
        """

        def change(models: dict[str, ModelManifest]) -> None:
            if manifest.name != replacing.name or models.get(manifest.name) != replacing:
                raise InvalidConfig(
                    f"name: {manifest.name} changed in the registry meanwhile; nothing replaced"
                )
            models[manifest.name] = manifest

        self._update(change)

    def remove(self, name: str) -> ModelManifest:
        """Forget the model ``name`` and return its manifest.

        Raises:
            UnknownModel: no model has that name.
        """
        removed: list[ModelManifest] = []

        def change(models: dict[str, ModelManifest]) -> None:
            if name not in models:
                _unknown(name)
            removed.append(models.pop(name))

        self._update(change)
        return removed[0]

    def _current(self) -> dict[str, ModelManifest]:
        with self._lock:
            self.refresh()
            return self._models

    def _update(self, change: Callable[[dict[str, ModelManifest]], None]) -> None:
        with self._lock, file_lock(self.path):
            self.refresh()
            models = dict(self._models)
            change(models)
            if self.path is not None:
                write_atomic(self.path, registry_to_text(models.values()))
                self._file_stamp = registry_stamp(self.path)
            self._models = models


def _refuse_taken(models: dict[str, ModelManifest], name: str) -> None:
    if name in models:
        raise InvalidConfig(f"name: a model named {shown(name)} is already registered")


def _insert(models: dict[str, ModelManifest], manifest: ModelManifest) -> None:
    _refuse_taken(models, manifest.name)
    models[manifest.name] = manifest


def _unknown(name: str) -> ModelManifest:
    raise UnknownModel(f"no registered model {shown(name)}")
