"""The CLI's run file: `RunConfig`, its ``[managed]`` section and its ``[[instances]]``.

Pure values with ``validate()`` methods, built from the per-runtime settings of `_config`
(`ManagedConfig`, `InferConfig`, `Supervision`); loading them from TOML is `convert`'s job.
All durations are float seconds. The run file is inferactors' own (no seed counterpart).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from .._errors import InvalidConfig, shown
from .._flavor import InferFlavor
from .binding import hosts_collide, spec_host
from .config import DEFAULT_PASSTHROUGH, ControlMode, InferConfig, ManagedConfig
from .field_checks import check_positive
from .front_door import FrontDoorConfig
from .residency import InstanceResidency, ResidencySection, check_residency
from .server_logs import ServerLogs
from .spec import InferenceSpec, valid_token
from .supervision import RestartPolicy, Supervision
from .trust import TrustAnchorEntry, check_signed_by


@attrs.frozen
class ManagedSection:
    """The ``[managed]`` table of a run file: `ManagedConfig` for every flavor at once.

    ``serve_programs`` maps a flavor to its server executable (a TOML table keyed by flavor
    id). Relative paths were resolved against the run file's directory by the loader.
    ``infer.llamacpp`` may be left out, and ``run_as`` too: `RunConfig.with_defaults` fills
    them in when the supervisor starts (`RunDefaults`).
    """

    registry: Path
    data_root: Path
    serve_programs: tuple[tuple[InferFlavor, Path], ...] = ()
    """The server executable of each flavor (``{"infer.llamacpp" = "/path/llama-server"}``);
    without an ``infer.llamacpp`` entry, the llama-server ``inferactors llama-server`` finds
    ($INFERACTORS_LLAMA_SERVER, then PATH, then the pinned build), named in a line at start."""
    env: tuple[tuple[str, str], ...] = ()
    env_passthrough: tuple[str, ...] = DEFAULT_PASSTHROUGH
    run_as: str | None = None
    """The unprivileged account the servers run as (a user name, ``uid`` or ``uid:gid``;
    never root); left out: the supervisor's own user, or ``nobody`` when the supervisor runs
    as root, said in a line at start. Only root can run servers as another user: not as
    root, another user is refused as the file is read (``_service/run_defaults.py``)."""
    restart: RestartPolicy = RestartPolicy()  # noqa: RUF009  (frozen value)
    keep_alive: str | int = "30m"
    readiness_timeout_s: float = 600.0
    logs: ServerLogs = ServerLogs()  # noqa: RUF009  (frozen value)
    trust_anchors: tuple[TrustAnchorEntry, ...] = ()

    def serve_program(self, flavor: InferFlavor) -> Path | None:
        """The executable configured for ``flavor``, or None."""
        return dict(self.serve_programs).get(flavor)

    def managed_config(self, flavor: InferFlavor) -> ManagedConfig:
        """The `ManagedConfig` of ``flavor`` (not validated; see `validate`)."""
        return ManagedConfig(
            registry=self.registry,
            data_root=self.data_root,
            serve_program=self.serve_program(flavor),
            env=self.env,
            env_passthrough=self.env_passthrough,
            run_as=self.run_as,
            restart=self.restart,
            keep_alive=self.keep_alive,
            readiness_timeout_s=self.readiness_timeout_s,
            logs=self.logs,
            trust_anchors=self.trust_anchors,
        )

    def validate(self, field: str = "$.managed") -> None:
        """Raise `InvalidConfig` naming the field, as `ManagedConfig.validate`."""
        self.managed_config(InferFlavor.OLLAMA).validate(field)


@attrs.frozen
class RunDefaults:
    """What a run file may leave out, as the supervisor found it (`RunConfig.with_defaults`).

    ``llama_server``: the llama-server found (None: none was); ``looked``: where, in words
    (``"$INFERACTORS_LLAMA_SERVER unset, none on PATH, no build at /var/cache/..."``);
    ``run_as``: the account servers run as when ``run_as`` is left out (``"nobody"`` for a
    supervisor running as root, else None: its own user).
    """

    llama_server: Path | None = None
    looked: str = ""
    run_as: str | None = None


@attrs.frozen
class RunInstance:
    """One ``[[instances]]`` entry: the control mode, optional ``supervision`` and
    ``residency`` tables, and ``required``, beside the spec's keys (flat in TOML).

    ``required`` (default true): the supervisor exists for this instance. Once it is down
    for good (refused, given up, held down) ``inferactors run`` exits, and ``/readyz`` is
    503 while it is not Running. An optional one (``required = false``) going down is
    reported and the others go on.
    """

    mode: ControlMode
    """``managed`` (inferactors starts the server) or ``adopted`` (somebody else runs it)."""
    spec: InferenceSpec
    supervision: Supervision = Supervision()  # noqa: RUF009  (frozen value)
    """This instance's restart policy, readiness and deep-health settings."""
    residency: InstanceResidency = InstanceResidency()  # noqa: RUF009  (frozen value)
    """On-demand starts, idle TTL and concurrency of this instance."""
    required: bool = True
    """Whether ``inferactors run`` exits once this instance is down for good."""


@attrs.frozen
class RunConfig:
    """The CLI's run file: node identity, probe timeouts, managed settings, residency
    (`ResidencySection`: budget, queue bounds, preload, groups), instances."""

    node_id: str = "local"
    """A plain token (1-64 chars) naming this machine in instance ids."""
    probe_timeout_s: float = 2.0
    """Timeout of one health probe, seconds."""
    deep_timeout_s: float = 300.0
    """Timeout of the one-token completion of a deep health, seconds."""
    managed: ManagedSection | None = None
    """The ``[managed]`` table: settings of every managed server."""
    residency: ResidencySection | None = None
    """The ``[residency]`` table: the memory budget, queues and groups."""
    instances: tuple[RunInstance, ...] = ()
    """The ``[[instances]]``: one table per server, named by its ``role``."""
    front_door: FrontDoorConfig | None = None
    """The ``[front_door]`` table: one HTTP address for every model (``front_door.py``)."""

    def infer_config(self, flavor: InferFlavor, mode: ControlMode) -> InferConfig:
        """The validated per-runtime config for ``flavor`` in ``mode``.

        Raises:
            InvalidConfig: managed mode without a ``[managed]`` section, or a bad setting.
        """
        probe_s, deep_s = self.probe_timeout_s, self.deep_timeout_s
        if mode is ControlMode.ADOPTED:
            return InferConfig.adopted(flavor, probe_timeout_s=probe_s, deep_timeout_s=deep_s)
        if self.managed is None:
            raise InvalidConfig("$.managed: managed instances need a [managed] section")
        managed = self.managed.managed_config(flavor)
        return InferConfig.managing(flavor, managed, probe_timeout_s=probe_s, deep_timeout_s=deep_s)

    def validate(self) -> None:
        """Check the whole run file; messages name the path (``$.instances[1].serve.host``).

        Besides each spec's own rules: node_id is a plain token (1-64 chars), timeouts are
        positive, a managed instance names a model, has a ``[managed]`` section and,
        except on Ollama, a serve program for its flavor, and no two instances share an
        ip:port (`check_endpoints`).

        Raises:
            InvalidConfig: the first problem found.
        """
        if not valid_token(self.node_id, 64):
            raise InvalidConfig(
                f"$.node_id must be a plain token (1-64 chars), got {shown(self.node_id)}"
            )
        check_positive("$.probe_timeout_s", self.probe_timeout_s)
        check_positive("$.deep_timeout_s", self.deep_timeout_s)
        if self.managed is not None:
            self.managed.validate()
        for index, instance in enumerate(self.instances):
            self._check_instance(f"$.instances[{index}]", instance)
        check_endpoints(self.instances)
        check_roles(self.instances)
        check_residency(
            self.residency,
            [instance.spec.role for instance in self.instances],
            [instance.residency for instance in self.instances],
            [instance.mode is ControlMode.ADOPTED for instance in self.instances],
        )
        if self.front_door is not None:
            self.front_door.validate()

    def require_instances(self) -> None:
        """Refuse a run file with nothing to supervise (``inferactors run`` and its reloads).

        Raises:
            InvalidConfig: ``$.instances`` is empty.
        """
        if not self.instances:
            raise InvalidConfig(
                "$.instances: the run file names no instance: nothing to supervise "
                "(add an [[instances]] table)"
            )

    def _check_instance(self, path: str, instance: RunInstance) -> None:
        try:
            instance.spec.validate()
        except InvalidConfig as error:
            raise InvalidConfig(f"{path}.{error}") from None
        instance.supervision.validate(f"{path}.supervision")
        if instance.spec.signed_by:
            self._check_signed_by(path, instance)
        if instance.mode is ControlMode.ADOPTED:
            return
        flavor = instance.spec.runtime
        if instance.spec.model is None:
            raise InvalidConfig(f'{path}.model is required when mode = "managed"')
        if self.managed is None:
            raise InvalidConfig(f"{path}: a managed instance needs a [managed] section")
        defaulted = (InferFlavor.OLLAMA, InferFlavor.LLAMACPP)  # none needed; `with_defaults`
        if flavor not in defaulted and self.managed.serve_program(flavor) is None:
            raise InvalidConfig(
                f'{path}: $.managed.serve_programs has no "{flavor.id}" entry for this '
                "managed instance"
            )

    def needs_llama_server(self) -> bool:
        """Whether a managed llama.cpp instance has no program named for it (the run file
        left ``serve_programs."infer.llamacpp"`` out: `with_defaults` fills it in)."""
        return self.managed is not None and any(
            instance.mode is ControlMode.MANAGED
            and instance.spec.runtime is InferFlavor.LLAMACPP
            and self.managed.serve_program(InferFlavor.LLAMACPP) is None
            for instance in self.instances
        )

    def with_defaults(self, defaults: RunDefaults) -> RunConfig:
        """This run file with what it left out filled in from ``defaults``: the llama-server
        of a managed llama.cpp instance, and ``run_as`` when the supervisor runs as root.

        Raises:
            InvalidConfig: a managed llama.cpp instance has no program and none was found
                (``$.managed.serve_programs: ...``, naming where it was looked for).
        """
        managed = self.managed
        if managed is None:
            return self
        if self.needs_llama_server():
            if defaults.llama_server is None:
                first = next(
                    index
                    for index, instance in enumerate(self.instances)
                    if instance.mode is ControlMode.MANAGED
                    and instance.spec.runtime is InferFlavor.LLAMACPP
                )
                raise InvalidConfig(
                    f'$.managed.serve_programs has no "infer.llamacpp" entry for '
                    f"$.instances[{first}], and no llama-server was found ({defaults.looked})"
                    ': name one, or build the pinned one with "inferactors llama-server"'
                )
            programs = (*managed.serve_programs, (InferFlavor.LLAMACPP, defaults.llama_server))
            managed = attrs.evolve(managed, serve_programs=programs)
        if managed.run_as is None and defaults.run_as is not None:
            managed = attrs.evolve(managed, run_as=defaults.run_as)
        return attrs.evolve(self, managed=managed)

    def _check_signed_by(self, path: str, instance: RunInstance) -> None:
        if instance.mode is ControlMode.ADOPTED:
            raise InvalidConfig(
                f"{path}.signed_by: an adopted server's model is not pinned, so no signature "
                'can be checked (signed_by needs mode = "managed")'
            )
        if instance.spec.runtime is InferFlavor.OLLAMA:
            raise InvalidConfig(
                f"{path}.signed_by: Ollama keeps an ollama model's files, so none is pinned "
                "and no signature can be checked"
            )
        anchors = self.managed.trust_anchors if self.managed is not None else ()
        check_signed_by(f"{path}.signed_by", instance.spec.signed_by, anchors)


def check_roles(instances: Sequence[RunInstance]) -> None:
    """Refuse two instances with one ``role``: the role is an instance's name in the run file
    (``inferactors status``, ``inferactors stop NAME``).

    Raises:
        InvalidConfig: ``$.instances[2].role: 'chat' is already the role of $.instances[0] ...``.
    """
    seen: dict[str, int] = {}
    for index, instance in enumerate(instances):
        role = instance.spec.role
        if role in seen:
            raise InvalidConfig(
                f"$.instances[{index}].role: {shown(role)} is already the role of "
                f"$.instances[{seen[role]}] (roles name instances: each must be unique)"
            )
        seen[role] = index


def check_endpoints(instances: Sequence[RunInstance]) -> None:
    """Refuse two instances on one ip:port, whatever their flavors and modes.

    Ports are the specs' (the flavor's default when unset); addresses collide as
    `binding.hosts_collide` says (``localhost`` and ``::1`` take both loopback families).

    Raises:
        InvalidConfig: ``$.instances[1].serve.port: 8080 on 127.0.0.1 is already used by
            $.instances[0]`` (with the other's address added when it differs).
    """
    seen: list[tuple[int, str, int]] = []
    for index, instance in enumerate(instances):
        host, port = spec_host(instance.spec), instance.spec.port()
        for other, other_host, other_port in seen:
            if port == other_port and hosts_collide(host, other_host):
                where = "" if other_host == host else f" (on {other_host})"
                raise InvalidConfig(
                    f"$.instances[{index}].serve.port: {port} on {host} is already used by "
                    f"$.instances[{other}]{where}"
                )
        seen.append((index, host, port))


@attrs.frozen
class Endpoint:
    """An address the supervisor itself listens on, which no instance may use: ``what`` it
    is, in words (``"the control API's port (--control-port)"``)."""

    host: str
    port: int
    what: str

    def check(self, config: RunConfig) -> None:
        """Refuse an instance of ``config`` on this address, by the footprint rule of
        `check_endpoints`.

        Raises:
            InvalidConfig: ``$.instances[0].serve.port: 8765 on 127.0.0.1 is the control
                API's port (--control-port): choose another``.
        """
        for index, instance in enumerate(config.instances):
            mine = spec_host(instance.spec)
            if instance.spec.port() == self.port and hosts_collide(mine, self.host):
                raise InvalidConfig(
                    f"$.instances[{index}].serve.port: {self.port} on {mine} is {self.what}: "
                    "choose another"
                )
