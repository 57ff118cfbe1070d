"""A managed runtime for tests: the tiny model registered, fake servers playing timelines.

`RuntimeKit` gathers what an application that embeds inferactors needs to test itself
against faults: a registry holding the tiny GGUF as ``"tiny"``, a fake llama-server program
that plays a `Timeline` (a drop-in ``serve_program``), a managed config that runs it as the
`Workspace`'s user (``nobody`` as root), a spec on a free port, and `RuntimeKit.runtime`,
an open runtime for an ``async with`` block (trio). Timing values are float seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from .._actors.runtime import InferRuntime
from .._actors.serving import open_runtime
from .._config.config import InferConfig, ManagedConfig
from .._config.spec import InferenceSpec, ServeArgs
from .._config.supervision import RestartPolicy
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from ._fake_launch import write_fake_server_program
from ._fake_processes import free_port
from ._timeline import Timeline
from ._tiny_models import write_tiny_gguf
from ._workspace import Workspace

QUICK_RESTARTS = RestartPolicy(max_restarts=3, base_s=0.2, cap_s=1.0, jitter=0.0)
"""The kit's default restart policy: three restarts, 0.2 s then doubling to 1 s, no jitter."""


@attrs.define(eq=False)
class RuntimeKit:
    """One test's managed runtime material, under ``root`` (a directory of ``workspace``).

    Attributes:
        workspace: where and as whom servers run.
        root: this test's world-readable directory.
        tiny_gguf: the tiny model file (written by the first `registry` call if None).
    """

    workspace: Workspace
    root: Path
    tiny_gguf: Path | None = None
    _programs: int = 0

    @classmethod
    def create(cls, workspace: Workspace, tiny_gguf: Path | None = None) -> RuntimeKit:
        """A kit in a fresh directory of ``workspace``."""
        return cls(workspace, workspace.directory("kit"), tiny_gguf)

    def registry(self) -> Path:
        """The registry file with the tiny GGUF registered as ``"tiny"`` (made once)."""
        path = self.root / "models.json"
        if not path.exists():
            if self.tiny_gguf is None:
                self.tiny_gguf = write_tiny_gguf(self.workspace.directory("models") / "tiny.gguf")
            ModelRegistry.open(path).add(self.tiny_gguf, name="tiny")
        return path

    def fake_program(self, timeline: Timeline | None = None) -> Path:
        """A new fake llama-server program playing ``timeline`` each time it is started
        (a managed restart starts it again from the beginning of the timeline)."""
        self._programs += 1
        faults = (timeline or Timeline()).server_faults("llamacpp")
        return write_fake_server_program(
            self.root / f"fake-llama-server-{self._programs}",
            faults=faults,
            python=self.workspace.python,
            sys_path=self.workspace.sys_path,
        )

    def config(
        self,
        timeline: Timeline | None = None,
        *,
        program: Path | None = None,
        restart: RestartPolicy = QUICK_RESTARTS,
        readiness_timeout_s: float = 30.0,
        deep_timeout_s: float = 10.0,
    ) -> InferConfig:
        """A managed llama.cpp config serving the registry with ``program`` (default: a
        fake llama-server playing ``timeline``), run as the workspace's user.

        Raises:
            InvalidConfig: a bad policy or timeout, or a step a fake cannot play.
        """
        managed = ManagedConfig(
            registry=self.registry(),
            data_root=self.root / "state",
            serve_program=program or self.fake_program(timeline),
            run_as=self.workspace.run_as,
            restart=restart,
            readiness_timeout_s=readiness_timeout_s,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed, deep_timeout_s=deep_timeout_s)

    def spec(self, role: str = "chat", port: int | None = None) -> InferenceSpec:
        """A managed llama.cpp spec for the ``"tiny"`` model on ``port`` (None: a free one)."""
        serve = ServeArgs(port=port or free_port())
        return InferenceSpec(role=role, runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)

    @asynccontextmanager
    async def runtime(
        self, timeline: Timeline | None = None, *, config: InferConfig | None = None
    ) -> AsyncIterator[InferRuntime]:
        """An open runtime (`inferactors.open_runtime`) for the block, managing fake
        llama-servers that play ``timeline`` (or ``config``, from `config`). Leaving the block
        stops every server it started; cancellation does the same.
        """
        async with open_runtime(config or self.config(timeline), node_id="test") as runtime:
            yield runtime
