"""The real llama-server that cannot start says why, and a second identical failure is a
configuration error, not a crash loop (issue 9 items 1 and 2).

Each case runs the pinned llama-server as ``nobody`` through the registry, as a user would:
a model registered corrupted (so its pin matches and the spawn goes ahead), a flag the
binary refuses, a port bound by another socket that does not listen. Each asserts the
server's own line in `ProcessExited.diagnosis`, then `GaveUp` "config-error" after the
second spawn, with no third.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from e2e.startup_support import assert_config_error, run_until_gave_up
from inferactors import open_runtime
from inferactors._actors.runtime import InferRuntime
from inferactors._config.config import InferConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.bundle import Edges
from inferactors._flavor import InferFlavor
from inferactors._models.registry import ModelRegistry
from inferactors._policy.admission import Plan
from support import Unprivileged


def spec(model: str, port: int) -> InferenceSpec:
    serve = ServeArgs(port=port)
    return InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, model=model, serve=serve)


def corrupted(tiny: Path, how: str) -> bytes:
    data = tiny.read_bytes()
    return {
        "empty": b"",
        "truncated": data[:5000],
        "random": random.Random(9).randbytes(100_000),
    }[how]


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("empty", "gguf_init_from_reader: failed to read magic"),
        ("truncated", "gguf_init_from_reader: failed to read key-value pairs"),
        ("random", "gguf_init_from_reader: invalid magic characters"),
    ],
)
async def test_a_corrupted_gguf_is_a_bad_model_file_and_a_config_error(
    managed_config: InferConfig,
    registry_path: Path,
    tiny_gguf: Path,
    unprivileged: Unprivileged,
    free_port: int,
    how: str,
    words: str,
) -> None:
    path = unprivileged.directory("models") / f"{how}.gguf"
    path.write_bytes(corrupted(tiny_gguf, how))
    path.chmod(0o644)
    ModelRegistry.open(registry_path).add(path, name=how)
    async with open_runtime(managed_config, node_id="test") as runtime:
        outcome = await run_until_gave_up(runtime, spec(how, free_port))
    assert_config_error(outcome, "bad model file", words)
    assert outcome.exits[0].exit_code == 1


async def test_a_flag_the_binary_refuses_is_an_invalid_flag_and_a_config_error(
    managed_config: InferConfig, free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flag is put into the plan past admission (the allowlist and the ``--help`` check
    would refuse it first): what matters here is what the binary says about it."""
    planned = InferRuntime._plan

    async def with_unknown_flag(
        self: InferRuntime, spec: InferenceSpec, config: InferConfig, where: Path
    ) -> Plan:
        plan = await planned(self, spec, config, where)
        assert plan.launch is not None
        launch = attrs.evolve(plan.launch, args=(*plan.launch.args, "--no-such-flag"))
        return attrs.evolve(plan, launch=launch)

    monkeypatch.setattr(InferRuntime, "_plan", with_unknown_flag)
    async with open_runtime(managed_config, node_id="test") as runtime:
        outcome = await run_until_gave_up(runtime, spec("tiny", free_port))
    assert_config_error(outcome, "invalid flag", "error: invalid argument: --no-such-flag")
    assert outcome.exits[-1].diagnosis is not None
    assert outcome.exits[-1].diagnosis.line == "error: invalid argument: --no-such-flag"


@pytest.fixture
def bound_not_listening(free_port: int) -> Iterator[int]:
    """A socket bound to 127.0.0.1:port without SO_REUSEADDR, never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", free_port))
        yield free_port


async def test_a_port_bound_by_another_socket_is_cannot_bind_and_a_config_error(
    managed_config: InferConfig, bound_not_listening: int
) -> None:
    """The occupied-port check before each spawn would find this socket; it is switched off
    so that the server meets it, as it does when the port is taken between check and bind."""

    async def never_taken(host: str, port: int) -> bool:
        return False

    edges = Edges(port_in_use=never_taken)
    async with open_runtime(managed_config, node_id="test", edges=edges) as runtime:
        outcome = await run_until_gave_up(runtime, spec("tiny", bound_not_listening))
    port = bound_not_listening
    line = f"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}"
    assert_config_error(outcome, "cannot bind", line)
