"""Admission's pure part: what a checked spec becomes (`Plan`), and the checks that need
no I/O.

The checks that probe, connect or read files are the admission actor's
(`inferactors._actors.admission.make_plan`).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from .._config.config import ControlMode, InferConfig
from .._config.spec import InferenceSpec
from .._config.supervision import RestartPolicy, Supervision
from .._errors import AdmissionRefused
from .._flavor import InferFlavor
from .._models.manifest import ResolvedModel
from .launch import Launch
from .pin_launch import view_path
from .privilege import RunAs
from .probe_report import ServerReport


@attrs.frozen
class Admission:
    """What ``admit`` answers: the runtime id, the host architecture and the notes."""

    runtime: str
    arch: str
    notes: tuple[str, ...]


@attrs.frozen
class Plan:
    """A checked spec, ready to load.

    ``launch`` is set for a managed llama.cpp or mlx-lm server; ``model`` is the verified
    registry model when managed; ``served_model`` is the name the server should list.
    """

    spec: InferenceSpec
    mode: ControlMode
    notes: tuple[str, ...]
    launch: Launch | None = None
    model: ResolvedModel | None = None
    supervision: Supervision = Supervision()  # noqa: RUF009  (frozen value)
    run_as: RunAs | None = None
    draft: ResolvedModel | None = None
    mmproj: ResolvedModel | None = None
    lora: tuple[ResolvedModel, ...] = ()
    api_key: str | None = attrs.field(default=None, repr=False)
    """The server's API key (``serve.api_key_file``'s content), sent by our probes; never
    shown (no repr, no event, no status)."""
    admitted: ServerReport | None = attrs.field(default=None, repr=False, eq=False)
    """An adopted server's report at admission: its status until it is watched."""

    @property
    def weight_files(self) -> tuple[Path, ...]:
        """Every model file the server reads (shards, tokenizer files, the draft's, the
        projector's and the LoRA adapters')."""
        files: list[Path] = []
        for model in (self.model, self.draft, self.mmproj, *self.lora):
            if model is not None:
                files += [*model.shards, *model.tokenizer]
        return tuple(files)

    @property
    def restart_policy(self) -> RestartPolicy:
        """The instance's restart policy (the defaults when none was given)."""
        return self.supervision.restart or RestartPolicy()

    @property
    def listed_names(self) -> tuple[str, ...]:
        """Names the server may list our model under; empty when any model will do.

        A managed llama-server lists its ``-m`` path (the ``--alias`` it is given) and
        mlx_lm.server its ``--model`` directory resolved, which is the model's view in the
        instance directory (``_models/pinned_view.py``), whatever the registry calls the
        model, so those count as well as the registry name; an adopted server must list the
        spec's model.
        """
        model = self.model
        if model is None:
            return (self.spec.model,) if self.spec.model else ()
        weights = model.shards[0] if model.shards and model.format.value == "gguf" else model.root
        names = (model.name, str(weights), weights.name)
        if self.spec.runtime is InferFlavor.MLX_LM and self.launch is not None:
            return (*names, str(view_path(self.launch.cwd, "model", model.root.name)))
        return names

    @property
    def served_model(self) -> str | None:
        """The tag for managed Ollama, the registry name for a managed process, the spec's
        model when adopted."""
        if self.model is None:
            return self.spec.model
        if self.spec.runtime is InferFlavor.OLLAMA:
            return self.model.ollama_tag
        return self.model.name


def check_runtime_and_port(spec: InferenceSpec, config: InferConfig) -> None:
    """Refuse a spec of another flavor (when ``config`` has one), or one whose port is
    outside the allowed range.

    Raises:
        AdmissionRefused: naming the flavor or the port and the range.
    """
    if config.flavor is not None and spec.runtime is not config.flavor:
        raise AdmissionRefused(f"{config.flavor.id} cannot run a {spec.runtime.id} workload")
    if config.allowed_ports is not None:
        lo, hi = config.allowed_ports
        port = spec.port()
        if not lo <= port <= hi:
            raise AdmissionRefused(f"port {port} is outside this runtime's allowed range {lo}-{hi}")


def resolve_supervision(given: Supervision | None, config: InferConfig) -> Supervision:
    """Fill ``given``'s unset fields from the runtime's managed defaults (and the deep-health
    timeout from ``config.deep_timeout_s``).

    Adopted instances are never restarted and have no readiness deadline; only their
    watchdog applies (it reports, it never kills).
    """
    given = given or Supervision()
    given.validate()
    managed = config.managed
    deep_timeout_s = given.deep_timeout_s or config.deep_timeout_s
    if managed is None:
        return attrs.evolve(
            given, restart=None, readiness_timeout_s=None, deep_timeout_s=deep_timeout_s
        )
    return attrs.evolve(
        given,
        restart=given.restart or managed.restart,
        readiness_timeout_s=given.readiness_timeout_s or managed.readiness_timeout_s,
        deep_timeout_s=deep_timeout_s,
    )
