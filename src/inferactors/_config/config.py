"""Runtime configuration: how one runtime runs its instances (`ControlMode`, the managed
settings `ManagedConfig`, the runtime's `InferConfig`, one flavor or every flavor).

Pure values with ``validate()`` methods. The restart policy, the watchdog and the
per-instance `Supervision` are in `supervision`, the field checks the classes share in
`field_checks`; the run file's classes (`RunConfig`, `ManagedSection`, `RunInstance`) are
in `runfile`, and loading them from TOML is `convert`'s job. All durations are float
seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path

import attrs

from .._errors import AdmissionRefused, InvalidConfig
from .._flavor import InferFlavor
from .field_checks import (
    check_env,
    check_env_names,
    check_port,
    check_port_range,
    check_positive,
    check_run_as,
)
from .keep_alive import check_keep_alive as check_keep_alive
from .keep_alive import check_managed_keep_alive
from .server_logs import ServerLogs
from .supervision import RestartPolicy
from .supervision import Watchdog as Watchdog  # `_actors/instance/probing.py` imports it here
from .trust import TrustAnchorEntry, check_trust_anchors

DEFAULT_PASSTHROUGH: tuple[str, ...] = ()
"""Environment variables handed from the supervisor to a managed server by default: none.
A server gets its own instance directory as HOME and a minimal PATH (``_policy/launch.py``),
never the supervisor's (root's, perhaps); name them to pass them on."""


class ControlMode(enum.StrEnum):
    """Whether inferactors starts the server (managed) or watches one already running."""

    MANAGED = "managed"
    ADOPTED = "adopted"


@attrs.frozen
class ManagedConfig:
    """Settings for servers inferactors starts itself.

    Attributes:
        registry: The model registry file.
        data_root: Instance directories are created at ``data_root/<instance id>``.
        serve_program: The server executable (llama-server, mlx_lm.server); Ollama needs none.
        version_probe: argv run to learn the server's version (first stdout line).
        env: Variables set in the server's cleared environment.
        env_passthrough: Names copied from the supervisor's environment when set there.
        run_as: Unprivileged account: a user name, ``uid`` or ``uid:gid``; never root.
        restart: The restart policy.
        keep_alive: Ollama keep_alive: a Go duration string (``"30m"``) or seconds.
        readiness_timeout_s: Seconds a started server may take to become ready.
        logs: How much of each server's output is kept (`ServerLogs`, ``[managed.logs]``).
        trust_anchors: The keys and certificate roots model signatures are verified
            against (`TrustAnchorEntry`; none: a model registered with a signature cannot
            be verified, so it is refused).
    """

    registry: Path
    data_root: Path
    serve_program: Path | None = None
    version_probe: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    env_passthrough: tuple[str, ...] = DEFAULT_PASSTHROUGH
    run_as: str | None = None
    restart: RestartPolicy = RestartPolicy()  # noqa: RUF009  (frozen value)
    keep_alive: str | int = "30m"
    readiness_timeout_s: float = 600.0
    logs: ServerLogs = ServerLogs()  # noqa: RUF009  (frozen value)
    trust_anchors: tuple[TrustAnchorEntry, ...] = ()

    def validate(self, field: str = "managed") -> None:
        """Raise `InvalidConfig` naming the field (``managed.env[0]``, ...) when a setting
        is malformed: an empty version probe, a bad environment name or value, a root or
        malformed ``run_as``, a bad keep_alive, a bad restart policy or timeout."""
        if self.version_probe is not None and not self.version_probe:
            raise InvalidConfig(f"{field}.version_probe must name a program")
        check_env(f"{field}.env", self.env)
        check_env_names(f"{field}.env_passthrough", self.env_passthrough)
        check_run_as(f"{field}.run_as", self.run_as)
        check_managed_keep_alive(f"{field}.keep_alive", self.keep_alive)
        self.restart.validate(f"{field}.restart")
        check_positive(f"{field}.readiness_timeout_s", self.readiness_timeout_s)
        self.logs.validate(f"{field}.logs")
        check_trust_anchors(f"{field}.trust_anchors", self.trust_anchors)


@attrs.frozen
class InferConfig:
    """Configuration of one runtime: one flavor in one control mode, or every flavor in
    both modes.

    Build with `InferConfig.adopted` or `InferConfig.managing` (one flavor, one mode), or
    `InferConfig.all_flavors` (one runtime holding managed and adopted instances of any
    flavor, each load choosing its mode; `for_instance` is the single-flavor config each
    instance is planned and run with).

    Attributes:
        flavor: The server flavor; None: every flavor (`all_flavors`).
        managed: Managed settings; None means adopted (with every flavor: adopted only).
            With every flavor they hold what the managed servers share, and
            ``serve_program`` is unset: each flavor's is in ``serve_programs``.
        probe_timeout_s: Timeout of one health probe, seconds.
        deep_timeout_s: Timeout of the one-token completion, seconds.
        probe_port: Port probed for capabilities; None means the flavor's default.
        allowed_ports: Inclusive ``(lo, hi)`` range of ports instances may use.
        serve_programs: With every flavor: each flavor's server executable (Ollama needs
            none), as ``(flavor, path)`` pairs; empty for one flavor.
    """

    flavor: InferFlavor | None
    managed: ManagedConfig | None = None
    probe_timeout_s: float = 2.0
    deep_timeout_s: float = 300.0
    probe_port: int | None = None
    allowed_ports: tuple[int, int] | None = None
    serve_programs: tuple[tuple[InferFlavor, Path], ...] = ()

    @classmethod
    def adopted(
        cls,
        flavor: InferFlavor,
        *,
        probe_timeout_s: float = 2.0,
        deep_timeout_s: float = 300.0,
        probe_port: int | None = None,
        allowed_ports: tuple[int, int] | None = None,
    ) -> InferConfig:
        """A validated config for watching servers already running.

        Raises:
            InvalidConfig: as `validate`.
        """
        config = cls(flavor, None, probe_timeout_s, deep_timeout_s, probe_port, allowed_ports)
        config.validate()
        return config

    @classmethod
    def managing(
        cls,
        flavor: InferFlavor,
        managed: ManagedConfig,
        *,
        probe_timeout_s: float = 2.0,
        deep_timeout_s: float = 300.0,
        probe_port: int | None = None,
        allowed_ports: tuple[int, int] | None = None,
    ) -> InferConfig:
        """A validated config for servers inferactors starts (Ollama: models it loads).

        Raises:
            InvalidConfig: as `validate`.
        """
        config = cls(flavor, managed, probe_timeout_s, deep_timeout_s, probe_port, allowed_ports)
        config.validate()
        return config

    @classmethod
    def all_flavors(
        cls,
        managed: ManagedConfig | None = None,
        *,
        serve_programs: Mapping[InferFlavor, Path | str | None] | None = None,
        probe_timeout_s: float = 2.0,
        deep_timeout_s: float = 300.0,
        allowed_ports: tuple[int, int] | None = None,
    ) -> InferConfig:
        """A validated config for one runtime that holds managed and adopted instances of
        every flavor: ``runtime.load(spec, mode=...)`` chooses each one's mode (managed by
        default when ``managed`` is given, else adopted).

        ``managed`` holds what the managed servers share (registry, data root, ``run_as``,
        environment, restart policy, ...) and no ``serve_program``; ``serve_programs``
        names each flavor's executable (``{InferFlavor.LLAMACPP: locate_llama_server()}``;
        a None value is left out: a managed spec of that flavor is then refused at load,
        saying it has no serve program; a `str` is taken as a path). Without ``managed``
        every instance is adopted.

        Raises:
            InvalidConfig: as `validate`; a program that is neither a path nor a `str`,
                naming ``serve_programs[<flavor>]``.
        """
        programs = tuple(
            (flavor, _program_path(flavor, program))
            for flavor, program in (serve_programs or {}).items()
            if program is not None
        )
        config = cls(
            None,
            managed,
            probe_timeout_s,
            deep_timeout_s,
            None,
            allowed_ports,
            programs,
        )
        config.validate()
        return config

    @property
    def mode(self) -> ControlMode:
        """MANAGED when managed settings are present, else ADOPTED (with every flavor: the
        mode a load takes when it names none)."""
        return ControlMode.ADOPTED if self.managed is None else ControlMode.MANAGED

    @property
    def adapter_id(self) -> str:
        """``infer.llamacpp`` when managed, ``infer.llamacpp.adopted`` when adopted (likewise
        for the other flavors); ``infer`` with every flavor."""
        if self.flavor is None:
            return "infer"
        suffix = ".adopted" if self.mode is ControlMode.ADOPTED else ""
        return self.flavor.id + suffix

    def serve_program(self, flavor: InferFlavor) -> Path | None:
        """The executable that runs ``flavor``'s managed servers, or None."""
        if self.flavor is None:
            return dict(self.serve_programs).get(flavor)
        return self.managed.serve_program if self.managed is not None else None

    def for_instance(self, flavor: InferFlavor, mode: ControlMode) -> InferConfig:
        """The one-flavor, one-mode config an instance of ``flavor`` in ``mode`` is planned
        and run with: this config itself for one flavor; with every flavor, its settings
        with ``flavor``'s serve program.

        Raises:
            AdmissionRefused: another flavor than this config's, another mode than this
                one-flavor config's, or managed with no managed settings.
        """
        if self.flavor is not None:
            if flavor is not self.flavor:
                raise AdmissionRefused(f"{self.flavor.id} cannot run a {flavor.id} workload")
            if mode is not self.mode:
                raise AdmissionRefused(
                    f"{self.adapter_id} runs {self.mode} instances only, not {mode} ones "
                    "(InferConfig.all_flavors holds both)"
                )
            return self
        if mode is ControlMode.ADOPTED:
            return InferConfig(
                flavor, None, self.probe_timeout_s, self.deep_timeout_s, None, self.allowed_ports
            )
        if self.managed is None:
            raise AdmissionRefused(
                f"a managed {flavor.id} instance needs managed settings: this runtime's "
                "config has none (InferConfig.all_flavors(managed=...))"
            )
        managed = attrs.evolve(self.managed, serve_program=self.serve_program(flavor))
        return InferConfig(
            flavor, managed, self.probe_timeout_s, self.deep_timeout_s, None, self.allowed_ports
        )

    def validate(self) -> None:
        """Raise `InvalidConfig` naming the field for non-positive timeouts, a probe port
        outside 1..65535, an allowed range not ``1 <= lo <= hi <= 65535``, or bad managed
        settings; with every flavor, also for a ``managed.serve_program`` (each flavor's
        is in ``serve_programs``) or ``serve_programs`` without managed settings, and with
        one flavor for ``serve_programs`` at all."""
        check_positive("probe_timeout_s", self.probe_timeout_s)
        check_positive("deep_timeout_s", self.deep_timeout_s)
        if self.probe_port is not None:
            check_port("probe_port", self.probe_port)
        if self.allowed_ports is not None:
            check_port_range("allowed_ports", self.allowed_ports)
        if self.managed is not None:
            self.managed.validate()
        self._check_programs()

    def _check_programs(self) -> None:
        if self.flavor is not None:
            if self.serve_programs:
                raise InvalidConfig(
                    "serve_programs: a one-flavor config names its program in managed.serve_program"
                )
            return
        if self.managed is not None and self.managed.serve_program is not None:
            raise InvalidConfig(
                "managed.serve_program: a config of every flavor names each flavor's "
                "program in serve_programs"
            )
        if self.serve_programs and self.managed is None:
            raise InvalidConfig("serve_programs: without managed settings nothing is started")
        seen: set[InferFlavor] = set()
        for index, (flavor, program) in enumerate(self.serve_programs):
            if flavor in seen:
                raise InvalidConfig(f"serve_programs[{index}]: {flavor.id} is named twice")
            if not isinstance(program, Path):
                raise InvalidConfig(
                    f"serve_programs[{index}]: expected a pathlib.Path, got "
                    f"{type(program).__name__}"
                )
            seen.add(flavor)


def _program_path(flavor: object, program: object) -> Path:
    """``program`` as a `Path` (a `str` converted); anything else refused naming the field."""
    if isinstance(program, str | Path):
        return Path(program)
    name = getattr(flavor, "id", flavor)
    raise InvalidConfig(
        f"serve_programs[{name}]: expected a path (pathlib.Path or str), got "
        f"{type(program).__name__}"
    )
