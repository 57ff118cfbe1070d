"""Runtime configuration: restart policy, managed settings, per-runtime and per-instance configs.

Pure values with ``validate()`` methods, and the field checks they share; the run file's
classes (`RunConfig`, `ManagedSection`, `RunInstance`) are in `runfile`, and loading them
from TOML is `convert`'s job. All durations are float seconds.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from .._errors import AdmissionRefused, InvalidConfig, cut, shown
from .._flavor import InferFlavor
from .keep_alive import check_keep_alive as check_keep_alive
from .keep_alive import check_managed_keep_alive
from .server_logs import ServerLogs
from .trust import TrustAnchorEntry, check_trust_anchors

DEFAULT_PASSTHROUGH: tuple[str, ...] = ()
"""Environment variables handed from the supervisor to a managed server by default: none.
A server gets its own instance directory as HOME and a minimal PATH (``_policy/launch.py``),
never the supervisor's (root's, perhaps); name them to pass them on."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]*\$?")
_IDS = re.compile(r"([0-9]+)(?::([0-9]+))?")


class ControlMode(enum.StrEnum):
    """Whether inferactors starts the server (managed) or watches one already running."""

    MANAGED = "managed"
    ADOPTED = "adopted"


class RestartType(enum.StrEnum):
    """OTP's child restart types: which exits of a managed server are restarted.

    ``permanent`` restarts after any exit it did not ask for, ``transient`` only after an
    abnormal one (a non-zero status, a signal, a readiness timeout or a health kill), and
    ``temporary`` never. An operator's stop is never restarted.
    """

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


@attrs.frozen
class RestartPolicy:
    """How often and how fast a crashed managed server is restarted.

    Attributes:
        max_restarts: Restarts allowed before giving up (the budget), refilled once the
            server stays up for ``stable_after_s``.
        base_s: Delay before the first restart, seconds.
        cap_s: Longest delay, seconds.
        stable_after_s: Seconds a server must stay up before the budget is refilled.
        restart_type: OTP's permanent, transient or temporary.
        intensity: OTP's MaxR: at most this many restarts within ``period_s`` (a sliding
            window on trio's clock), whatever the budget says.
        period_s: OTP's MaxT, seconds.
        jitter: Fraction of each delay that may be taken off at random (0 to 1), so many
            servers that crash together do not restart in lockstep.
    """

    max_restarts: int = 5
    base_s: float = 2.0
    cap_s: float = 60.0
    stable_after_s: float = 60.0
    restart_type: RestartType = RestartType.PERMANENT
    intensity: int = 10
    period_s: float = 600.0
    jitter: float = 0.1

    def delay_s(self, n: int) -> float:
        """Seconds to wait before restart number ``n`` (0-based).

        ``min(base_s * 2**min(n, 16), cap_s)``; with base 2 s and cap 10 s that gives
        2, 4, 8, 10, 10.
        """
        return min(self.base_s * (1 << min(max(n, 0), 16)), self.cap_s)

    def validate(self, field: str = "restart") -> None:
        """Raise `InvalidConfig` naming ``field.<name>`` for a negative budget, a
        non-positive or non-finite base, a cap below the base or a negative stable time."""
        if self.max_restarts < 0:
            raise InvalidConfig(f"{field}.max_restarts must not be negative")
        check_positive(f"{field}.base_s", self.base_s)
        check_positive(f"{field}.cap_s", self.cap_s)
        if self.cap_s < self.base_s:
            raise InvalidConfig(f"{field}.cap_s must not be below {field}.base_s")
        if not (math.isfinite(self.stable_after_s) and self.stable_after_s >= 0):
            raise InvalidConfig(f"{field}.stable_after_s must be a finite number >= 0")
        if self.intensity < 0:
            raise InvalidConfig(f"{field}.intensity must not be negative")
        check_positive(f"{field}.period_s", self.period_s)
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidConfig(f"{field}.jitter must be between 0 and 1")


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
    restart: RestartPolicy = RestartPolicy()
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
            _check_port("probe_port", self.probe_port)
        if self.allowed_ports is not None:
            _check_port_range("allowed_ports", self.allowed_ports)
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


MIN_WATCHDOG_INTERVAL_S = 0.1
"""The shortest `Watchdog.interval_s` accepted, float seconds: each check is a completion
request, and a shorter interval would spend the server on our checks."""
MIN_WATCHDOG_TIMEOUT_S = 0.25
"""The shortest `Watchdog.timeout_s` accepted, float seconds: the lateness our own event
loop is allowed around a deadline (``LATE_S`` in ``_policy/lateness.py``); a shorter one
could be spent whole by our own loop and kill a healthy server in a loop."""


@attrs.frozen
class Watchdog:
    """The deep-health watchdog of one instance.

    Every ``interval_s`` seconds while the server is up, ask it for one token with a
    ``timeout_s`` deadline; after ``failures`` failures in a row report it unhealthy and,
    when managed, kill it (stop reason "health kill") so the restart policy takes over.
    """

    interval_s: float = 30.0
    timeout_s: float = 30.0
    failures: int = 3

    def validate(self, field: str = "watchdog") -> None:
        """Raise `InvalidConfig` naming the field for non-positive values and for an
        interval or a deadline too short to honour (`MIN_WATCHDOG_INTERVAL_S`,
        `MIN_WATCHDOG_TIMEOUT_S`)."""
        check_positive(f"{field}.interval_s", self.interval_s)
        check_positive(f"{field}.timeout_s", self.timeout_s)
        for name, value, least in (
            ("interval_s", self.interval_s, MIN_WATCHDOG_INTERVAL_S),
            ("timeout_s", self.timeout_s, MIN_WATCHDOG_TIMEOUT_S),
        ):
            if value < least:
                raise InvalidConfig(
                    f"{field}.{name} = {value:g} is too short to honour: a deep-health check "
                    f"cannot be judged in less than {least:g} s (a healthy server would be "
                    "killed over and over); use at least that"
                )
        if self.failures < 1:
            raise InvalidConfig(f"{field}.failures must be at least 1")


SLOW_AFTER_S = 10.0
"""Default `Supervision.slow_after_s`: a first token slower than 10 s is Degraded (slow)."""


@attrs.frozen
class Supervision:
    """Per-instance supervision settings; None fields take the runtime's defaults.

    Attributes:
        restart: the restart policy (default: ``ManagedConfig.restart``).
        readiness_timeout_s: seconds a started server may take to answer Up before it is
            killed and counted as a failure (default: ``ManagedConfig.readiness_timeout_s``).
        watchdog: the deep-health watchdog, off when None.
        deep_timeout_s: seconds one deep health may take (the probe and the one-token
            completion together): readiness's first token, a `deep_health` call, and the
            completion that checks a server whose ``/health`` failed (default:
            ``InferConfig.deep_timeout_s``). Separate from ``readiness_timeout_s``; the
            watchdog's checks use ``watchdog.timeout_s``.
        slow_after_s: a deep health whose first token takes longer than this many seconds
            leaves the server Degraded "slow: ..." until one is quick again (default
            `SLOW_AFTER_S`, 10 s).
    """

    restart: RestartPolicy | None = None
    readiness_timeout_s: float | None = None
    watchdog: Watchdog | None = None
    deep_timeout_s: float | None = None
    slow_after_s: float | None = None

    @property
    def slow_threshold_s(self) -> float:
        """``slow_after_s``, or `SLOW_AFTER_S` when unset."""
        return SLOW_AFTER_S if self.slow_after_s is None else self.slow_after_s

    def validate(self, field: str = "supervision") -> None:
        """Raise `InvalidConfig` naming the field for a bad value."""
        if self.restart is not None:
            self.restart.validate(f"{field}.restart")
        if self.readiness_timeout_s is not None:
            check_positive(f"{field}.readiness_timeout_s", self.readiness_timeout_s)
        if self.watchdog is not None:
            self.watchdog.validate(f"{field}.watchdog")
        for name in ("deep_timeout_s", "slow_after_s"):
            value = getattr(self, name)
            if value is not None:
                check_positive(f"{field}.{name}", value)


def check_env(field: str, env: Sequence[tuple[str, str]]) -> None:
    """Raise `InvalidConfig` (``field[i]``) for a bad name, a ``LLAMA_ARG_*`` name (llama-server
    reads those as flags) or a value containing NUL."""
    for index, (name, value) in enumerate(env):
        _check_env_name(f"{field}[{index}]", name)
        if "\x00" in value:
            raise InvalidConfig(f"{field}[{index}] ({cut(name)}) must not contain NUL")


def check_env_names(field: str, names: Sequence[str]) -> None:
    """Raise `InvalidConfig` (``field[i]``) for a name that is not ``[A-Za-z_][A-Za-z0-9_]*``
    or that starts with ``LLAMA_ARG_``."""
    for index, name in enumerate(names):
        _check_env_name(f"{field}[{index}]", name)


def _check_env_name(field: str, name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise InvalidConfig(f"{field} {shown(name)} is not a valid environment variable name")
    if name.startswith("LLAMA_ARG_"):
        raise InvalidConfig(
            f"{field} {cut(name)}: LLAMA_ARG_* variables are read by llama-server as flags; "
            "use serve.extra_args instead"
        )


def check_run_as(field: str, run_as: str | None) -> None:
    """Raise `InvalidConfig` unless ``run_as`` is None, a user name other than root, or
    ``uid[:gid]`` with uid (and gid) not 0 (a managed server never runs as root)."""
    if run_as is None:
        return
    ids = _IDS.fullmatch(run_as)
    if ids is not None:
        if int(ids.group(1)) == 0 or (ids.group(2) is not None and int(ids.group(2)) == 0):
            raise InvalidConfig(f"{field} must not be root (uid or gid 0)")
        return
    if not _USER_NAME.fullmatch(run_as) or len(run_as) > 32:
        raise InvalidConfig(f"{field} {shown(run_as)} is neither a user name nor uid[:gid]")
    if run_as == "root":
        raise InvalidConfig(f"{field} must not be root")


def check_positive(field: str, value: float) -> None:
    """Raise `InvalidConfig` naming ``field`` unless ``value`` is finite and above 0 (seconds)."""
    if not (math.isfinite(value) and value > 0):
        raise InvalidConfig(f"{field} must be a positive number of seconds, got {value}")


def _check_port(field: str, port: int) -> None:
    if not 0 < port <= 65535:
        raise InvalidConfig(f"{field} {port} is outside 1..65535")


def _check_port_range(field: str, ports: tuple[int, int]) -> None:
    lo, hi = ports
    _check_port(f"{field}[0]", lo)
    _check_port(f"{field}[1]", hi)
    if lo > hi:
        raise InvalidConfig(f"{field} ({lo}, {hi}) is empty: lo must be <= hi")
