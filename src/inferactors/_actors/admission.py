"""Admission: the read-only checks shared by ``admit`` and ``load``, with their I/O.

Planning only ever sends GET requests and TCP connects, so ``admit`` may run
before any permission is granted. Every refusal is `AdmissionRefused` unless the spec itself
is malformed (`InvalidConfig`). A managed instance's checks all run, and every problem they
find is reported at once, each naming its field (`Problems`). A probe that gives no verdict
because our own loop ran late is made again at once (`probe_for_verdict`, in
``admission_probes.py`` with the bound on probes in flight), never read as a server that is
not there.

Besides the model, a managed process plan checks:

- `check_binary_flags`: every ``extra_args`` flag must be one the serve program's
  ``--help`` lists (`ServeHelp`, cached by the program's digest); refused naming the flag
  and the program's version.
- `resolve_extras` (``admission_models.py``, with the model and the draft): ``serve.mmproj``
  and ``serve.lora`` resolved and verified by the registry like the model (and later pinned
  at every spawn like it, ``instance/pins.py``).
- `read_api_key`: ``serve.api_key_file`` read once, through one descriptor: a regular file
  of at most 4 KiB, owned by the user the server runs as, with no access for group or
  others, holding one line. The key itself never appears in a message.
"""

from __future__ import annotations

import os
import os.path
from functools import partial
from pathlib import Path

import attrs

from .._config.binding import spec_host
from .._config.config import ControlMode, InferConfig, ManagedConfig
from .._config.convert import checked_spec
from .._config.spec import InferenceSpec
from .._edges.bundle import Edges
from .._edges.containment import resolve_run_as, user_name
from .._edges.probe import ProberFactory
from .._edges.probe_auth import with_api_key
from .._edges.serve_help import CACHE_DIR, ServeHelp
from .._errors import AdmissionRefused, InvalidConfig, NoVerdict, shown
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from .._policy.admission import Plan, check_runtime_and_port
from .._policy.help_flags import check_known_flags
from .._policy.launch import build_launch
from .._policy.ollama_parse import same_tag
from .._policy.privilege import RunAs, require_unprivileged, switch_refusal
from .._policy.probe_report import ServerReport, Unhealthy, Unreachable, Up
from .admission_models import draft_model, registered_model, resolve_extras
from .admission_probes import probe_for_verdict
from .admission_problems import Problems
from .api_key_file import read_api_key
from .capabilities import managed_version
from .identity import wrong_family


async def make_plan(
    spec: InferenceSpec,
    config: InferConfig,
    *,
    registry: ModelRegistry | None,
    edges: Edges,
    instance_dir: Path,
    dry: bool = False,
) -> Plan:
    """Check ``spec`` against ``config`` and build its plan (see the module docstring).

    ``dry`` (a reload's check before it changes anything) leaves out what only the start
    can tell: the occupied-port check (the port may be held by the very server being
    replaced) and the probe of an adopted server or of the Ollama daemon. Every other
    check runs (typed fields, the registry's models and their pins, the binary's flags,
    the API key file, ``run_as``).

    Args:
        spec: the inference spec; validated here.
        config: the runtime's config (flavor, mode, ports, timeouts).
        registry: the model registry; required when managed.
        edges: the runtime's edges: the HTTP prober, the occupied-port check (a bind on the
            host's footprint), the supervisor's effective uid (as root, a managed server
            needs ``run_as``) and the serve programs' ``--help`` cache.
        instance_dir: where a managed server will run (its cwd); not created here.

    Raises:
        InvalidConfig: the spec is malformed, or names an ``extra_args`` flag the serve
            program's ``--help`` does not list (or that help cannot be read).
        AdmissionRefused: the spec cannot run here; the message says why.
        NoVerdict: the probe of an adopted server or of the Ollama daemon gave no verdict
            (our own loop ran late, even on re-checks): nothing is known; ask again later.
    """
    spec = checked_spec(spec)
    spec.validate()
    check_runtime_and_port(spec, config)
    if config.managed is None:
        key = await _adopted_key(spec, edges)
        if dry:
            dry_notes = ("not probed (dry)",)
            return Plan(spec=spec, mode=ControlMode.ADOPTED, notes=dry_notes, api_key=key)
        return await _plan_adopted(spec, config, edges, key)
    if registry is None:
        raise AdmissionRefused("managed mode needs a model registry")
    if spec.runtime is InferFlavor.OLLAMA:
        if dry:
            model = await registered_model(spec, registry)
            return Plan(spec=spec, mode=ControlMode.MANAGED, notes=(), model=model)
        return await _plan_ollama(spec, config, registry, edges.open_prober)
    problems = Problems()
    euid = edges.containment.euid()
    run_as = problems.call("run_as", partial(_run_as, config.managed, euid))
    plan = await _plan_process(
        spec,
        config.managed,
        registry,
        instance_dir,
        edges,
        run_as,
        problems,
        check_port=not dry,
    )
    key = None
    if spec.serve.api_key_file is not None and not problems.has("run_as"):
        read = read_api_key(spec.serve.api_key_file, run_as=run_as, euid=euid)
        key = await problems.wait("serve.api_key_file", read)
    problems.raise_any()
    assert plan is not None  # every check passed
    if key is not None:
        plan = attrs.evolve(plan, api_key=key, notes=(*plan.notes, "API key read"))
    if run_as is None:
        return plan
    notes = (*plan.notes, f"runs as user {run_as.name} (uid {run_as.uid})")
    return attrs.evolve(plan, run_as=run_as, notes=notes)


def _run_as(managed: ManagedConfig, euid: int) -> RunAs | None:
    """``managed.run_as`` resolved: none as root, or another user not as root, refused."""
    run_as = resolve_run_as(managed.run_as) if managed.run_as else None
    require_unprivileged(run_as, euid)
    if run_as is not None:
        why = switch_refusal(run_as, euid=euid, user=user_name(euid))
        if why is not None:
            raise InvalidConfig(f"run_as {shown(managed.run_as)}: {why}")
    return run_as


async def _adopted_key(spec: InferenceSpec, edges: Edges) -> str | None:
    """An adopted server's ``serve.api_key_file``, read as for a managed one (a private
    regular file of one line, owned by our own user): our probes send it, as they do to a
    managed server started with it. None without the setting."""
    if spec.serve.api_key_file is None:
        return None
    euid = edges.containment.euid()
    return await read_api_key(spec.serve.api_key_file, run_as=None, euid=euid)


def _no_verdict_refusal(base: str, report: ServerReport) -> NoVerdict:
    """Not a refusal: `NoVerdict` (nothing is known about the server; ask again later)."""
    why = getattr(report.health, "why", "")
    return NoVerdict(f"cannot tell whether {base} answers now: {why}; try again")


async def _plan_adopted(
    spec: InferenceSpec, config: InferConfig, edges: Edges, api_key: str | None
) -> Plan:
    base = spec.base_url()
    prober = with_api_key(edges.open_prober, api_key)
    report = await probe_for_verdict(prober, base, config.probe_timeout_s, spec.runtime)
    if report.no_verdict:
        raise _no_verdict_refusal(base, report)
    if isinstance(report.health, Unreachable):
        why = await wrong_family(edges.net, spec, report) or report.health.why
        raise AdmissionRefused(f"no {spec.runtime.id} server answering at {base}: {why}")
    notes = [
        f"endpoint {base}",
        f"adopting running server ({type(report.health).__name__})",
        f"{len(report.models)} model(s) listed",
    ]
    if report.version:
        notes.append(f"version {report.version}")
    if api_key is not None:
        notes.append("API key read")
    return Plan(
        spec=spec, mode=ControlMode.ADOPTED, notes=tuple(notes), admitted=report, api_key=api_key
    )


async def _plan_ollama(
    spec: InferenceSpec,
    config: InferConfig,
    registry: ModelRegistry,
    open_prober: ProberFactory,
) -> Plan:
    """Plan a managed Ollama model: the registry model, then one probe of the daemon (GETs
    only).

    The tag is the manifest's ``ollama_tag`` (else the model name); it must be listed by
    ``/api/tags`` as Ollama reads names (``m`` is ``library/m:latest``; `same_tag`),
    since inferactors never pulls.

    Raises:
        AdmissionRefused: no model or registry, an unknown or non-Ollama model, a daemon that
            does not answer (inferactors does not start it), or an unpulled tag.
    """
    model = await registered_model(spec, registry)
    base = spec.base_url()
    report = await probe_for_verdict(open_prober, base, config.probe_timeout_s, spec.runtime)
    if report.no_verdict:
        raise _no_verdict_refusal(base, report)
    if isinstance(report.health, Unreachable):
        raise AdmissionRefused(
            f"ollama is not answering at {base}; inferactors drives it but does not start it"
        )
    if isinstance(report.health, Unhealthy):
        raise AdmissionRefused(f"ollama at {base} is not healthy: {report.health.why}")
    if not isinstance(report.health, Up):
        raise AdmissionRefused(f"ollama at {base} is still starting; try again")
    tag = model.ollama_tag
    if not any(same_tag(tag, listed) for listed in report.models):
        raise AdmissionRefused(
            f"ollama has no model {tag}: pull it first (inferactors never downloads)"
        )
    notes = (
        f"endpoint {base}",
        f"model {model.name} is ollama tag {tag}, pulled",
        f"version {report.version}" if report.version else "version unknown",
    )
    return Plan(spec=spec, mode=ControlMode.MANAGED, notes=notes, model=model)


async def _plan_process(
    spec: InferenceSpec,
    managed: ManagedConfig,
    registry: ModelRegistry,
    instance_dir: Path,
    edges: Edges,
    run_as: RunAs | None,
    problems: Problems,
    *,
    check_port: bool = True,
) -> Plan | None:
    """The plan of a managed process; None when a check refused (recorded in ``problems``:
    every check runs, whatever an earlier one found, except the flags' check, which runs
    the program and so needs it and ``run_as`` sound)."""
    model = await problems.wait("model", registered_model(spec, registry))
    draft = None
    if spec.serve.draft_model is not None:
        draft = await problems.wait("serve.draft_model", draft_model(spec, registry))
    extras = await problems.wait("serve", resolve_extras(spec, registry))
    program = problems.call("serve_programs", partial(_serve_program, managed))
    euid = edges.containment.euid()
    if program is not None and not problems.has("run_as"):
        check = check_binary_flags(
            spec, managed, program, serve_help=edges.serve_help, run_as=run_as, euid=euid
        )
        await problems.wait("serve.extra_args", check)
    if check_port and await edges.port_in_use(spec_host(spec), spec.port()):
        problems.call("serve.port", partial(_port_taken, spec))
    if model is None or program is None or extras is None or problems.any():
        return None
    mmproj, lora = extras
    launch = build_launch(
        spec,
        model,
        draft,
        program=program,
        cwd=instance_dir,
        env=managed.env,
        passthrough=managed.env_passthrough,
        parent_env=os.environ,
        mmproj=mmproj,
        lora=lora,
    )
    notes = (
        f"endpoint {spec.base_url()}",
        f"model {model.name} ({model.format.value}) verified"
        + (f", signed by {model.signed_by}" if model.signed_by else ""),
        f"launch {program} with {len(launch.args)} args",
    )
    return Plan(
        spec=spec,
        mode=ControlMode.MANAGED,
        notes=notes,
        launch=launch,
        model=model,
        draft=draft,
        mmproj=mmproj,
        lora=lora,
    )


def _port_taken(spec: InferenceSpec) -> None:
    raise AdmissionRefused(
        f"something already holds port {spec.port()} on {spec_host(spec)}; "
        "adopt it instead of managing over it"
    )


def _serve_program(managed: ManagedConfig) -> Path:
    program = managed.serve_program
    if program is None:
        raise AdmissionRefused("managed mode needs a serve program (the server binary)")
    if not (program.is_file() and os.access(program, os.X_OK)):
        raise AdmissionRefused(f"serve program {program} is not an executable file")
    return program


# The binary's own flags.


async def check_binary_flags(
    spec: InferenceSpec,
    managed: ManagedConfig,
    program: Path,
    *,
    serve_help: ServeHelp,
    run_as: RunAs | None,
    euid: int,
) -> None:
    """Refuse an ``extra_args`` flag ``program`` does not list; nothing is run when the
    spec has no extra arguments.

    Raises:
        InvalidConfig: ``serve.extra_args[3]: --mlock is not a flag of PROGRAM (VERSION)``,
            or the help could not be read (timed out, no flags listed), naming the program.
    """
    if not spec.serve.extra_args:
        return
    known = await serve_help.known_flags(
        program,
        run_as=run_as,
        euid=euid,
        state_dir=managed.data_root / CACHE_DIR,
        version=partial(_version, spec, managed),
    )
    check_known_flags(spec.runtime, spec.serve.extra_args, known)


async def _version(spec: InferenceSpec, managed: ManagedConfig) -> str | None:
    return (await managed_version(spec.runtime, managed))[1]
