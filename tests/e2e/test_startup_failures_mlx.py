"""The real mlx_lm.server whose port is taken prints ``Address already in use`` and hangs:
it is stopped from that line, within a second or so, not at the readiness deadline, and the
second time is a configuration error (issue 9 item 3).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from e2e.startup_support import FAST, assert_config_error, run_until_gave_up
from inferactors import ModelFormat, open_runtime
from inferactors._config.config import InferConfig, ManagedConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.bundle import Edges
from inferactors._flavor import InferFlavor
from inferactors._models.registry import ModelRegistry
from inferactors.testing import write_python_program
from mlx_support import readable_tiny_mlx
from support import Unprivileged

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" and find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed on this platform (the dev extra installs it on Linux)",
)

STOPPED_WITHIN_S = 4.0
"""Spawn to exit: about 1 s of imports before the bind fails, then at most 1 s to stop it
(measured as nobody: 2.2-2.6 s, of which stopping took 0.02 s); the readiness deadline
is `FAST`'s 60 s."""


@pytest.fixture
def mlx_config(server_dir: Path, unprivileged: Unprivileged) -> InferConfig:
    program = write_python_program(
        unprivileged.directory("programs") / "mlx_lm.server",
        entry="mlx_lm.server:main",
        python=unprivileged.python,
        sys_path=unprivileged.sys_path,
    )
    model = readable_tiny_mlx(unprivileged.directory("models") / "tiny-mlx")
    registry = server_dir / "models.json"
    ModelRegistry.open(registry).add(model, name="tiny", format=ModelFormat.MLX)
    managed = ManagedConfig(
        registry=registry,
        data_root=server_dir / "state",
        serve_program=program,
        run_as=unprivileged.run_as,
    )
    return InferConfig.managing(InferFlavor.MLX_LM, managed)


@pytest.fixture
def listening(free_port: int) -> Iterator[int]:
    """Another program's listener on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", free_port))
        holder.listen()
        yield free_port


async def test_mlx_server_hung_on_a_taken_port_is_stopped_from_its_own_line(
    mlx_config: InferConfig, listening: int
) -> None:
    """The occupied-port check before each spawn is switched off, so the server meets the
    listener (as when the port is taken between the check and its bind)."""

    async def never_taken(host: str, port: int) -> bool:
        return False

    assert FAST.readiness_timeout_s is not None
    assert FAST.readiness_timeout_s > 10 * STOPPED_WITHIN_S
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.MLX_LM, model="tiny", serve=ServeArgs(port=listening)
    )
    async with open_runtime(mlx_config, node_id="test", edges=Edges(port_in_use=never_taken)) as rt:
        outcome = await run_until_gave_up(rt, spec)
    assert_config_error(outcome, "address in use", "OSError: [Errno 98] Address already in use")
    for started, exited in zip(outcome.spawns, outcome.exits, strict=True):
        ran_s = exited.at - started.at
        print(f"mlx_lm.server on a taken port: stopped {ran_s:.2f} s after its spawn")
        assert ran_s < STOPPED_WITHIN_S
        assert exited.signal is not None  # it hung: we ended it
