"""Capabilities through the runtime: `InferRuntime.provides` and `probe_capabilities`.

Seed-behaviour section 7 ("Capabilities") and checklist items 32 to 35: nothing is claimed
before a probe; an adopted runtime claims ``runtime.infer.llamacpp`` and ``format.gguf``
only when a server answers Up or Loading on ``127.0.0.1`` at the probe port; a managed one
needs an executable server program and a version probe that exits 0, whose first output
line is the version. HTTP goes through ``httpx.MockTransport`` or to a dead loopback port;
version probes are real processes.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from inferactors import (
    Capability,
    InferConfig,
    InferFlavor,
    ManagedConfig,
    http_prober_factory,
    open_runtime,
)
from inferactors._actors import capabilities as _capabilities

ADOPTED_LLAMA = (
    Capability("runtime.infer.llamacpp", mode="adopted", formats=("gguf",), version=None),
    Capability("format.gguf"),
)


def recording(status: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    """A server whose ``/health`` answers ``status`` (``/v1/models`` lists one model)."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny.gguf"}]})
        return httpx.Response(status, headers={"Location": "http://127.0.0.1:9/x"})

    return httpx.MockTransport(handle)


RUN_AS = "nobody" if os.geteuid() == 0 else None
"""Version probes run as the servers' ``run_as`` (issue 8 item 7): as root, ``nobody``."""


def managed(tmp_path: Path, program: Path | None, probe: tuple[str, ...] | None) -> InferConfig:
    settings = ManagedConfig(
        registry=tmp_path / "models.json",
        data_root=tmp_path / "state",
        serve_program=program,
        version_probe=probe,
        run_as=RUN_AS,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, settings)


def shell(script: str) -> tuple[str, ...]:
    return ("/bin/sh", "-c", script)


@pytest.fixture
def tmp_path(server_dir: Path) -> Path:
    """A world-readable directory (pytest's own ``tmp_path`` is root's, mode 0700), so the
    probes' user can run the programs written here."""
    return server_dir


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """An executable stand-in for llama-server (it is never run by these tests)."""
    path = tmp_path / "bin" / "server"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


async def test_an_adopted_runtime_claims_nothing_before_it_probes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx.Request] = []
    prober = http_prober_factory(recording(200, seen))
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP), open_prober=prober) as rt:
        assert rt.provides() == ()
        assert seen == [], "provides() must not probe"
        assert await rt.probe_capabilities() == ADOPTED_LLAMA
        assert rt.provides() == ADOPTED_LLAMA
    assert str(seen[0].url) == "http://127.0.0.1:8090/health"
    assert {request.method for request in seen} == {"GET"}


@pytest.mark.parametrize(
    ("status", "claimed"),
    [(200, True), (503, True), (404, True), (500, False), (302, False), (401, False)],
)
async def test_only_a_server_that_is_up_or_loading_is_a_capability(
    autojump_clock: trio.testing.MockClock, status: int, claimed: bool
) -> None:
    seen: list[httpx.Request] = []
    prober = http_prober_factory(recording(status, seen))
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_port=4321)
    async with open_runtime(config, open_prober=prober) as runtime:
        found = await runtime.probe_capabilities()
    assert found == (ADOPTED_LLAMA if claimed else ())
    assert seen[0].url.host == "127.0.0.1"
    assert seen[0].url.port == 4321
    assert "/x" not in [request.url.path for request in seen], "a redirect was followed"


async def test_a_dead_probe_port_claims_nothing(
    free_port: int,
) -> None:
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_port=free_port)
    async with open_runtime(config) as runtime:
        assert await runtime.probe_capabilities() == ()
        assert runtime.provides() == ()


async def test_capabilities_are_re_probed_not_remembered_forever(
    autojump_clock: trio.testing.MockClock,
) -> None:
    status = [200]

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status[0], json={"data": []})

    prober = http_prober_factory(httpx.MockTransport(handle))
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP), open_prober=prober) as rt:
        assert await rt.probe_capabilities() == ADOPTED_LLAMA
        status[0] = 500
        assert await rt.probe_capabilities() == ()
        assert rt.provides() == ()


async def test_managed_capabilities_come_from_the_real_llama_server_version(
    tmp_path: Path, llama_server: Path
) -> None:
    async with open_runtime(managed(tmp_path, llama_server, None)) as runtime:
        assert runtime.provides() == ()
        runtime_cap, format_cap = await runtime.probe_capabilities()
    assert (runtime_cap.name, runtime_cap.mode, runtime_cap.formats) == (
        "runtime.infer.llamacpp",
        "managed",
        ("gguf",),
    )
    assert runtime_cap.version is not None
    assert runtime_cap.version.startswith("version: ")
    assert format_cap == Capability("format.gguf")


@pytest.mark.parametrize("what", ["none", "missing", "not-executable", "directory"])
async def test_managed_capabilities_need_an_executable_server_program(
    tmp_path: Path, program: Path, what: str
) -> None:
    chosen = {
        "none": None,
        "missing": tmp_path / "missing",
        "not-executable": program,
        "directory": program.parent,
    }[what]
    await trio.Path(program).chmod(0o644)
    (tmp_path / "out").mkdir(mode=0o777)
    (tmp_path / "out").chmod(0o777)
    ran = tmp_path / "out" / "ran"
    probe = shell(f"touch {shlex.quote(str(ran))}; echo v1")
    async with open_runtime(managed(tmp_path, chosen, probe)) as runtime:
        assert await runtime.probe_capabilities() == ()
    assert not ran.exists(), "the version probe ran without a usable server program"


async def test_a_version_probe_that_fails_claims_nothing(tmp_path: Path, program: Path) -> None:
    for probe in (shell("echo v9; exit 3"), (str(tmp_path / "no-such-probe"),)):
        async with open_runtime(managed(tmp_path, program, probe)) as runtime:
            assert await runtime.probe_capabilities() == ()
            assert runtime.provides() == ()


async def test_the_version_is_the_first_output_line_cut_to_120_chars(
    tmp_path: Path, program: Path
) -> None:
    long = "v" + "1" * 200
    cases = {
        shell("echo; echo '  mlx-lm 0.32.2  '; echo second"): "mlx-lm 0.32.2",
        shell(f"echo {long}"): long[:120],
        shell("echo 'on stderr' >&2"): "on stderr",
        shell("exit 0"): None,
    }
    for probe, version in cases.items():
        async with open_runtime(managed(tmp_path, program, probe)) as runtime:
            runtime_cap, _ = await runtime.probe_capabilities()
        assert runtime_cap.version == version
        assert runtime_cap.mode == "managed"


async def test_the_version_probe_runs_with_a_cleared_environment(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERACTORS_TEST_SECRET", "leaked")
    probe = shell('echo "secret=${INFERACTORS_TEST_SECRET-unset} home=${HOME-unset} path=$PATH"')
    async with open_runtime(managed(tmp_path, program, probe)) as runtime:
        runtime_cap, _ = await runtime.probe_capabilities()
    assert runtime_cap.version == "secret=unset home=unset path=/usr/local/bin:/usr/bin:/bin"


async def test_a_version_probe_that_hangs_claims_nothing_after_its_timeout(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real process and a real clock (under MockClock, trio's SIGTERM-then-SIGKILL
    # escalation would fire before the process is seen to exit); 5 s shortened to 0.3 s.
    monkeypatch.setattr(_capabilities, "VERSION_PROBE_TIMEOUT_S", 0.3)
    async with open_runtime(managed(tmp_path, program, ("/bin/sleep", "60"))) as runtime:
        asked = trio.current_time()
        assert await runtime.probe_capabilities() == ()
        took_s = trio.current_time() - asked
    assert 0.3 <= took_s < 10.0
