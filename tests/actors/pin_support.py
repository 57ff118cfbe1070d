"""What the pin-at-spawn tests share: `PinLab`, one test's own copy of the tiny model (so
the test may tamper with it) with its registry, the fake server program and configs; and
the ways a model is tampered with. Events are read with ``e2e.field_support.Recorder``.

Imported as ``actors.pin_support``; the ``pin_lab`` fixture is in this folder's conftest.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs

from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    ManagedConfig,
    ModelRegistry,
    RestartPolicy,
    ServeArgs,
)
from inferactors.testing import FakeServerFaults, write_fake_server_program, write_tiny_gguf
from support import Unprivileged

WAIT_S = 30.0
"""Deadline of one wait on a real process (the machine has 2 busy cores)."""

NO_RESTARTS = RestartPolicy(max_restarts=0)


@attrs.frozen
class PinLab:
    """One test's model (``models/tiny.gguf``, registered as ``tiny``) and where its
    servers run, all world-readable so the unprivileged user can reach them."""

    unprivileged: Unprivileged
    root: Path

    @classmethod
    def create(cls, unprivileged: Unprivileged) -> PinLab:
        root = unprivileged.directory("pin")
        lab = cls(unprivileged, root)
        lab.model.parent.mkdir(mode=0o755)
        write_tiny_gguf(lab.model)
        ModelRegistry.open(lab.registry).add(lab.model, name="tiny")
        return lab

    @property
    def model(self) -> Path:
        return self.root / "models" / "tiny.gguf"

    @property
    def registry(self) -> Path:
        return self.root / "models.json"

    def reregister(self) -> None:
        """What an operator does after checking the file: remove the model, add it again."""
        registry = ModelRegistry.open(self.registry)
        registry.remove("tiny")
        registry.add(self.model, name="tiny")

    def fake_program(self, faults: FakeServerFaults | None = None) -> Path:
        """The fake llama-server (``inferactors.testing``), which never reads its model."""
        return write_fake_server_program(
            self.root / "fake-llama-server",
            faults=faults or FakeServerFaults(),
            python=self.unprivileged.python,
            sys_path=self.unprivileged.sys_path,
        )

    def config(self, program: Path, *, restart: RestartPolicy = NO_RESTARTS) -> InferConfig:
        managed = ManagedConfig(
            registry=self.registry,
            data_root=self.root / "state",
            serve_program=program,
            run_as=self.unprivileged.run_as,
            restart=restart,
            readiness_timeout_s=WAIT_S,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=10.0)


def chat(port: int) -> InferenceSpec:
    return InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


# ---- tampering ----------------------------------------------------------------------------


def rename_the_model_in_place(path: Path) -> None:
    """Change one byte of the model's name in its metadata, keeping size and mtime: still a
    valid model that the real llama-server loads, but not the pinned bytes."""
    info = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(b"tiny-random-llama") + len("tiny-random-llam")
    data[at] = ord("b")
    with path.open("r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def append_a_byte(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b"\0")


def link_outside_the_root(path: Path) -> None:
    """Replace the model by a link to an identical copy outside its root."""
    outside = path.parent.parent / "outside.gguf"
    shutil.copy2(path, outside)
    path.unlink()
    path.symlink_to(outside)
