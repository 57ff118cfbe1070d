"""The flags a serve program knows, from its own ``--help``, read once per program digest.

`ServeHelp.known_flags` hashes the program (BLAKE3, in a worker thread),
and for a digest not seen before runs ``<program> --help`` as a version probe is run
(``version_probe.py``: as ``run_as``, contained, cleared environment, a deadline), parses
the flags it lists (``_policy/help_flags.py``) and asks for its version. The answer is kept
in memory (per runtime: one `ServeHelp` per `Edges`) and in a small JSON file,
``<state dir>/<digest>.json``, so a new runtime on the same data root does not run
``--help`` again. The same bytes give the same answer; a rebuilt binary has a new digest.

A help that cannot be read (a timeout, a program that cannot start, a non-zero exit listing
no flags) is not cached: the next admission tries again.

Not caught: a program that is a wrapper script (mlx_lm.server's entry point, a ``sh``
script) keeps its digest when what it runs changes (``pip install -U mlx-lm``); remove the
cache file (or the whole ``serve-help`` directory) after such an upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio

from .._atomic_file import write_atomically
from .._errors import InvalidConfig
from .._models.hashing import blake3_file
from .._policy.help_flags import KnownFlags, parse_help_flags
from .._policy.privilege import RunAs
from .._safe_json import parse_json
from .._untrusted_file import read_capped
from .version_probe import ProbeOutput, run_probe_program

HELP_TIMEOUT_S = 20.0
"""How long ``<program> --help`` may run (seconds; mlx_lm.server imports MLX first)."""

CACHE_DIR = "serve-help"
"""The cache's directory under a managed runtime's data root."""

_CACHE_FORMAT = 1
_CACHE_CAP = 256 * 1024

HelpRunner = Callable[[tuple[str, ...], RunAs | None, int, float], Awaitable[ProbeOutput]]
"""``await run(argv, run_as, euid, timeout_s)``: runs a probe program (swappable)."""

VersionOf = Callable[[], Awaitable[str | None]]
"""``await version()``: the program's version line, or None."""


async def run_help(
    argv: tuple[str, ...], run_as: RunAs | None, euid: int, timeout_s: float
) -> ProbeOutput:
    """The real `HelpRunner`: `run_probe_program`."""
    return await run_probe_program(argv, run_as=run_as, euid=euid, timeout_s=timeout_s)


@attrs.define(eq=False)
class ServeHelp:
    """The per-runtime cache of what serve programs know (module docstring).

    Attributes:
        run: runs ``<program> --help`` (the real `run_help` by default; tests count runs).
        timeout_s: seconds ``--help`` may run.
    """

    run: HelpRunner = run_help
    timeout_s: float = HELP_TIMEOUT_S
    _memory: dict[str, KnownFlags] = attrs.field(factory=dict)
    _lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def known_flags(
        self,
        program: Path,
        *,
        run_as: RunAs | None,
        euid: int,
        state_dir: Path | None,
        version: VersionOf,
    ) -> KnownFlags:
        """What ``program`` says it knows (module docstring); never raises for the
        program's faults: a problem is stated in `KnownFlags.problem`.

        Args:
            program: the serve program.
            run_as: the user its ``--help`` runs as (as root: required).
            euid: the supervisor's effective uid.
            state_dir: where the cache file lives (None: memory only).
            version: asked for the version line on a miss.

        Cancellation: a ``--help`` running is killed with its group; nothing is cached.
        """
        try:
            digest = await trio.to_thread.run_sync(blake3_file, program)
        except OSError as error:
            return KnownFlags(str(program), None, frozenset(), f"cannot be read: {error}")
        async with self._lock:
            known = self._memory.get(digest)
            if known is None and state_dir is not None:
                known = await trio.to_thread.run_sync(_load, state_dir, digest)
            if known is None:
                known = await self._ask(program, run_as, euid, version)
                if known.problem is None and state_dir is not None:
                    await trio.to_thread.run_sync(_store, state_dir, digest, known)
            if known.problem is None:
                self._memory[digest] = known
        return attrs.evolve(known, program=str(program))

    async def _ask(
        self, program: Path, run_as: RunAs | None, euid: int, version: VersionOf
    ) -> KnownFlags:
        output = await self.run((str(program), "--help"), run_as, euid, self.timeout_s)
        text = (output.stdout + b"\n" + output.stderr).decode(errors="replace")
        flags = parse_help_flags(text)
        problem = None
        if output.exit_code is None:
            problem = f"--help {output.why or 'did not finish'}"
        elif not flags:
            problem = f"--help exited {output.exit_code} and listed no flags"
        line = await version() if problem is None else None
        return KnownFlags(str(program), line, flags, problem)


def _path(state_dir: Path, digest: str) -> Path:
    return state_dir / f"{digest}.json"


def _load(state_dir: Path, digest: str) -> KnownFlags | None:
    """The cached answer for ``digest``, or None when there is none or it is malformed."""
    try:
        data = parse_json(read_capped(_path(state_dir, digest), _CACHE_CAP, "help cache"))
    except (OSError, InvalidConfig):
        return None
    if not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT:
        return None
    program, version, flags = data.get("program"), data.get("version"), data.get("flags")
    if not isinstance(program, str) or not isinstance(flags, list) or not flags:
        return None
    if not (version is None or isinstance(version, str)):
        return None
    if not all(isinstance(flag, str) for flag in flags):
        return None
    return KnownFlags(program, version, frozenset(flags))


def _store(state_dir: Path, digest: str, known: KnownFlags) -> None:
    """Write the answer atomically (``_atomic_file.write_atomically``, mode 0600: private
    whatever the umask; no fsync); a failure only costs a ``--help`` run next time."""
    body = {
        "format": _CACHE_FORMAT,
        "program": known.program,
        "digest": digest,
        "version": known.version,
        "flags": sorted(known.flags),
    }
    text = json.dumps(body, indent=1) + "\n"
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(_path(state_dir, digest), text.encode(), mode=0o600, fsync=False)
    except OSError:
        pass  # not cached: the next spawn runs ``--help`` again
