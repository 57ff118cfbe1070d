"""Admission: the read-only checks shared by ``admit`` and ``load``, with their I/O.

Source: seed-behaviour.md section 4, ``plan()``, steps 1 to 8, and checklist items 16 to
19, 36 to 38. Planning only ever sends GET requests and TCP connects, so ``admit`` may run
before any permission is granted. Every refusal is `AdmissionRefused` unless the spec itself
is malformed (`InvalidConfig`).
"""

from __future__ import annotations

import os
import os.path
from functools import partial
from pathlib import Path

import attrs
import trio

from .._config.binding import spec_host
from .._config.config import ControlMode, InferConfig, ManagedConfig
from .._config.convert import checked_spec
from .._config.spec import InferenceSpec
from .._edges.bundle import Edges
from .._edges.containment import resolve_run_as
from .._edges.probe import ProberFactory, probe_once
from .._errors import AdmissionRefused, ModelError
from .._flavor import InferFlavor
from .._models.manifest import ResolvedModel
from .._models.registry import ModelRegistry
from .._policy.admission import Plan, check_runtime_and_port
from .._policy.launch import build_launch, check_format
from .._policy.ollama_parse import same_tag
from .._policy.privilege import RunAs, require_unprivileged
from .._policy.probe_parse import Unhealthy, Unreachable, Up
from .admission_extras import check_binary_flags, read_api_key, resolve_extras
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
            needs ``run_as``, checklist item 45) and the serve programs' ``--help`` cache.
        instance_dir: where a managed server will run (its cwd); not created here.

    Raises:
        InvalidConfig: the spec is malformed, or names an ``extra_args`` flag the serve
            program's ``--help`` does not list (or that help cannot be read).
        AdmissionRefused: the spec cannot run here; the message says why.
    """
    spec = checked_spec(spec)
    spec.validate()
    check_runtime_and_port(spec, config)
    if config.managed is None:
        if dry:
            return Plan(spec=spec, mode=ControlMode.ADOPTED, notes=("not probed (dry)",))
        return await _plan_adopted(spec, config, edges)
    if registry is None:
        raise AdmissionRefused("managed mode needs a model registry")
    if spec.runtime is InferFlavor.OLLAMA:
        if dry:
            model = await _registered_model(spec, registry)
            return Plan(spec=spec, mode=ControlMode.MANAGED, notes=(), model=model)
        return await _plan_ollama(spec, config, registry, edges.open_prober)
    euid = edges.containment.euid()
    run_as = _run_as(config.managed, euid)
    plan = await _plan_process(
        spec, config.managed, registry, instance_dir, edges, run_as, check_port=not dry
    )
    if spec.serve.api_key_file is not None:
        key = await read_api_key(spec.serve.api_key_file, run_as=run_as, euid=euid)
        plan = attrs.evolve(plan, api_key=key, notes=(*plan.notes, "API key read"))
    if run_as is None:
        return plan
    notes = (*plan.notes, f"runs as user {run_as.name} (uid {run_as.uid})")
    return attrs.evolve(plan, run_as=run_as, notes=notes)


def _run_as(managed: ManagedConfig, euid: int) -> RunAs | None:
    run_as = resolve_run_as(managed.run_as) if managed.run_as else None
    require_unprivileged(run_as, euid)
    return run_as


async def _plan_adopted(spec: InferenceSpec, config: InferConfig, edges: Edges) -> Plan:
    base = spec.base_url()
    report = await probe_once(edges.open_prober, base, config.probe_timeout_s, config.flavor)
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
    return Plan(spec=spec, mode=ControlMode.ADOPTED, notes=tuple(notes), admitted=report)


async def _plan_ollama(
    spec: InferenceSpec,
    config: InferConfig,
    registry: ModelRegistry,
    open_prober: ProberFactory,
) -> Plan:
    """Plan a managed Ollama model (seed-behaviour.md section 4, ``plan()`` steps 6 and 7;
    checklist 63 and 64): the registry model, then one probe of the daemon (GETs only).

    The tag is the manifest's ``ollama_tag`` (else the model name); it must be listed by
    ``/api/tags`` as Ollama reads names (``m`` is ``library/m:latest``; `same_tag`),
    since inferactors never pulls.

    Raises:
        AdmissionRefused: no model or registry, an unknown or non-Ollama model, a daemon that
            does not answer (inferactors does not start it), or an unpulled tag.
    """
    model = await _registered_model(spec, registry)
    base = spec.base_url()
    report = await probe_once(open_prober, base, config.probe_timeout_s, spec.runtime)
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
    *,
    check_port: bool = True,
) -> Plan:
    model = await _registered_model(spec, registry)
    draft = None
    if spec.serve.draft_model is not None:
        draft = await _resolve(registry, spec.serve.draft_model, spec.signed_by)
        check_format(spec.runtime, draft)
    mmproj, lora = await resolve_extras(spec, registry)
    program = _serve_program(managed)
    euid = edges.containment.euid()
    help_cache = edges.serve_help
    await check_binary_flags(
        spec, managed, program, serve_help=help_cache, run_as=run_as, euid=euid
    )
    if check_port and await edges.port_in_use(spec_host(spec), spec.port()):
        raise AdmissionRefused(
            f"something already holds port {spec.port()} on {spec_host(spec)}; "
            "adopt it instead of managing over it"
        )
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


async def _registered_model(spec: InferenceSpec, registry: ModelRegistry) -> ResolvedModel:
    """The spec's model, verified by the registry and of a format its flavor loads."""
    if spec.model is None:
        raise AdmissionRefused(
            "managed mode needs a model: set the spec's model to a registry name"
        )
    model = await _resolve(registry, spec.model, spec.signed_by)
    check_format(spec.runtime, model)
    return model


async def _resolve(
    registry: ModelRegistry, name: str, signed_by: tuple[str, ...] = ()
) -> ResolvedModel:
    """The verified model ``name``, signed by one of ``signed_by`` when that is not empty
    (the spec's requirement: checked here, recorded by the load once it succeeds)."""
    try:
        return await trio.to_thread.run_sync(partial(registry.resolve, name, signed_by=signed_by))
    except ModelError as error:
        raise AdmissionRefused(f"model {name}: {error}") from error


def _serve_program(managed: ManagedConfig) -> Path:
    program = managed.serve_program
    if program is None:
        raise AdmissionRefused("managed mode needs a serve program (the server binary)")
    if not (program.is_file() and os.access(program, os.X_OK)):
        raise AdmissionRefused(f"serve program {program} is not an executable file")
    return program
