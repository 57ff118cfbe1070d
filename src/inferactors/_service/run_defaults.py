"""What ``inferactors run`` fills in when the run file leaves it out, and the lines that say so.

A managed llama.cpp instance needs no ``serve_programs."infer.llamacpp"``: the llama-server
``inferactors llama-server`` finds is used (``$INFERACTORS_LLAMA_SERVER``, then ``PATH``,
then the pinned build that ``make demo`` built; never a build here). A supervisor running
as root with no ``run_as`` runs its servers as ``nobody`` (a managed server never runs as
root). The supervisor says each in one line at start; a reload fills them in the same way,
so an instance whose run file did not change is not restarted.

A supervisor not running as root can run its servers only as itself: a ``run_as`` naming
another user is refused as the file is read (`check_run_as`), naming the field and saying
to leave it out, before anything starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .._config.convert import load_run_config
from .._config.runfile import RunConfig, RunDefaults
from .._edges.containment import resolve_run_as, user_name
from .._edges.llama_build import cached_binary, locate_llama_server
from .._errors import BackendError, InvalidConfig, shown
from .._policy.privilege import switch_refusal

ROOT_RUN_AS = "nobody"
"""Who the servers run as when the supervisor runs as root and the run file names nobody."""
LLAMA_SERVER_ENV = "INFERACTORS_LLAMA_SERVER"


def load_run_file(path: Path) -> tuple[RunConfig, tuple[str, ...]]:
    """Read and validate the run file at ``path`` (`load_run_config`) and fill in what it
    left out (module docstring); also the lines that say what was filled in.

    Raises:
        InvalidConfig: as `load_run_config`; or a managed llama.cpp instance has no program
            and no llama-server was found, or ``$INFERACTORS_LLAMA_SERVER`` names no
            executable, or ``run_as`` names a user this supervisor cannot run servers as
            (`check_run_as`) (the message starts with the file's path and names the field).
    """
    config = load_run_config(path)
    try:
        euid = os.geteuid()
        check_run_as(config, euid)
        defaults = found_defaults(config, euid)
        return config.with_defaults(defaults), said(config, defaults)
    except InvalidConfig as error:
        raise InvalidConfig(f"{path}: {error}") from None


def check_run_as(config: RunConfig, euid: int) -> None:
    """Refuse a ``[managed] run_as`` that a supervisor of effective uid ``euid`` cannot run
    its servers as (`switch_refusal`: only root may run them as another user). As root,
    nothing is checked here: admission resolves ``run_as`` per instance, as it always did.

    Raises:
        InvalidConfig: ``$.managed.run_as 'nobody': running servers as another user needs
            root; this supervisor runs as newbie (uid 1000): leave run_as out to run them
            as newbie``; or ``run_as`` names no user on this host.
    """
    managed = config.managed
    if managed is None or managed.run_as is None or euid == 0:
        return
    try:
        run_as = resolve_run_as(managed.run_as)
    except InvalidConfig as error:
        raise InvalidConfig(f"$.managed.{error}") from None
    why = switch_refusal(run_as, euid=euid, user=user_name(euid))
    if why is not None:
        raise InvalidConfig(f"$.managed.run_as {shown(managed.run_as)}: {why}")


def found_defaults(config: RunConfig, euid: int) -> RunDefaults:
    """What this machine gives ``config`` for what it left out (the llama-server is looked
    for only when a managed llama.cpp instance needs one).

    Raises:
        InvalidConfig: ``$INFERACTORS_LLAMA_SERVER`` is set but names no executable file.
    """
    run_as = ROOT_RUN_AS if euid == 0 else None
    if not config.needs_llama_server():
        return RunDefaults(run_as=run_as)
    try:
        found = locate_llama_server()
    except BackendError as error:
        field = '$.managed.serve_programs has no "infer.llamacpp" entry'
        raise InvalidConfig(f"{field}: {error}") from None
    return RunDefaults(llama_server=found, looked=_looked(found), run_as=run_as)


def _looked(found: Path | None) -> str:
    """Where the llama-server was found, or where it was looked for, in words."""
    if os.environ.get(LLAMA_SERVER_ENV):
        return f"${LLAMA_SERVER_ENV}"
    if found is not None:
        return "on PATH" if shutil.which("llama-server") else "the pinned build"
    return f"${LLAMA_SERVER_ENV} unset, none on PATH, no pinned build at {cached_binary()}"


def said(config: RunConfig, defaults: RunDefaults) -> tuple[str, ...]:
    """One line for each default ``config`` takes from ``defaults``."""
    lines = []
    if config.needs_llama_server() and defaults.llama_server is not None:
        lines.append(
            f"llama-server: {defaults.llama_server} ({defaults.looked}; the run file's "
            '[managed] serve_programs names no "infer.llamacpp")'
        )
    managed = config.managed
    if managed is not None and managed.run_as is None and defaults.run_as is not None:
        lines.append(
            f"running as root: the servers run as user {defaults.run_as} "
            "(the run file's [managed] names no run_as)"
        )
    return tuple(lines)
