"""The serve-help cache (issue 9 item 4): ``--help`` runs once per program digest, per
runtime in memory and across runtimes through the data root's cache file; a failed read is
not cached; the real llama-server's help is read as the unprivileged user."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import attrs

from inferactors._edges.containment import resolve_run_as
from inferactors._edges.serve_help import ServeHelp, run_help
from inferactors._edges.version_probe import ProbeOutput
from inferactors._policy.privilege import RunAs
from support import Unprivileged

HELP = (
    Path(__file__).parents[1] / "policy" / "help_texts" / "llama_server_0.5.0-dev.txt"
).read_bytes()


@attrs.define
class CountingRunner:
    """A fake `HelpRunner`: answers ``output`` and counts its runs."""

    output: ProbeOutput = attrs.field(factory=lambda: ProbeOutput(0, HELP))
    runs: list[tuple[str, ...]] = attrs.Factory(list)

    async def __call__(
        self, argv: tuple[str, ...], run_as: RunAs | None, euid: int, timeout_s: float
    ) -> ProbeOutput:
        self.runs.append(argv)
        return self.output


async def version() -> str:
    return "version: 0.5.0-dev (build 0, commit unknown)"


async def ask(help_cache: ServeHelp, program: Path, state: Path | None) -> frozenset[str]:
    known = await help_cache.known_flags(
        program, run_as=None, euid=1000, state_dir=state, version=version
    )
    assert known.problem is None, known.problem
    assert known.version == "version: 0.5.0-dev (build 0, commit unknown)"
    return known.flags


def program_at(tmp_path: Path, body: bytes = b"#!/bin/sh\necho llama\n") -> Path:
    program = tmp_path / "llama-server"
    program.write_bytes(body)
    return program


async def test_one_run_per_digest_in_a_runtime_and_none_in_the_next(tmp_path: Path) -> None:
    program, state = program_at(tmp_path), tmp_path / "state" / "serve-help"
    runner = CountingRunner()
    first = ServeHelp(run=runner)
    flags = await ask(first, program, state)
    assert "--alias" in flags
    assert "--mlock" not in flags
    assert await ask(first, program, state) == flags
    assert runner.runs == [(str(program), "--help")]
    cached = list(state.iterdir())
    assert len(cached) == 1
    assert cached[0].suffix == ".json"
    assert oct(state.stat().st_mode & 0o777) == "0o700"

    second = ServeHelp(run=runner)  # a new runtime on the same data root
    assert await ask(second, program, state) == flags
    assert len(runner.runs) == 1

    without_file = ServeHelp(run=runner)  # no state dir: it has to ask
    await ask(without_file, program, None)
    assert len(runner.runs) == 2


async def test_new_program_bytes_are_asked_again(tmp_path: Path) -> None:
    program, state = program_at(tmp_path), tmp_path / "state"
    runner = CountingRunner()
    cache = ServeHelp(run=runner)
    await ask(cache, program, state)
    program.write_bytes(b"#!/bin/sh\necho rebuilt\n")
    await ask(cache, program, state)
    assert len(runner.runs) == 2
    assert len(list(state.iterdir())) == 2


async def test_a_failed_help_is_stated_and_not_cached(tmp_path: Path) -> None:
    program, state = program_at(tmp_path), tmp_path / "state"
    runner = CountingRunner(ProbeOutput(None, why="timed out after 20 s"))
    cache = ServeHelp(run=runner)
    for _ in range(2):
        known = await cache.known_flags(
            program, run_as=None, euid=1000, state_dir=state, version=version
        )
        assert known.problem == "--help timed out after 20 s"
        assert known.flags == frozenset()
    assert len(runner.runs) == 2
    assert not state.exists()
    runner.output = ProbeOutput(1, b"error: unknown argument\n")
    known = await cache.known_flags(
        program, run_as=None, euid=1000, state_dir=state, version=version
    )
    assert known.problem == "--help exited 1 and listed no flags"


async def test_a_damaged_cache_file_is_ignored(tmp_path: Path) -> None:
    program, state = program_at(tmp_path), tmp_path / "state"
    runner = CountingRunner()
    await ask(ServeHelp(run=runner), program, state)
    (cached,) = state.iterdir()
    for damage in ("{", json.dumps({"format": 1, "flags": [1]}), "[]", "x" * 300_000):
        cached.write_text(damage)
        await ask(ServeHelp(run=runner), program, state)
        assert json.loads(cached.read_text())["flags"]  # rewritten whole
    assert len(runner.runs) == 5


async def test_a_missing_program_is_a_problem_not_an_error(tmp_path: Path) -> None:
    runner = CountingRunner()
    known = await ServeHelp(run=runner).known_flags(
        tmp_path / "nope", run_as=None, euid=1000, state_dir=None, version=version
    )
    assert known.problem is not None
    assert known.problem.startswith("cannot be read:")
    assert runner.runs == []


async def test_the_real_llama_server_help_as_the_unprivileged_user(
    llama_server: Path, unprivileged: Unprivileged
) -> None:
    run_as = resolve_run_as(unprivileged.run_as) if unprivileged.run_as else None
    runs: list[float] = []

    async def timed(
        argv: tuple[str, ...], user: RunAs | None, euid: int, timeout_s: float
    ) -> ProbeOutput:
        started = time.monotonic()
        output = await run_help(argv, user, euid, timeout_s)
        runs.append(time.monotonic() - started)
        return output

    cache = ServeHelp(run=timed)
    for _ in range(2):
        known = await cache.known_flags(
            llama_server, run_as=run_as, euid=os.geteuid(), state_dir=None, version=version
        )
        assert known.problem is None
        assert {"--alias", "--jinja", "--api-key-file", "--load-mode"} <= known.flags
        assert "--mlock" not in known.flags
    assert len(runs) == 1
    assert runs[0] < 10.0


async def test_the_cache_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    program, state = program_at(tmp_path), tmp_path / "state" / "serve-help"
    old = os.umask(0)
    try:
        await ask(ServeHelp(run=CountingRunner()), program, state)
    finally:
        os.umask(old)
    (cached,) = state.iterdir()
    assert oct(cached.stat().st_mode & 0o777) == "0o600"
