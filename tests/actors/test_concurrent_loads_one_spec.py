"""Fifty concurrent loads of one spec: exactly one wins, every other is refused as already
loaded (never "File exists"), and the winner's instance directory is still there, so its
server starts and runs. Before, a refused load could remove the directory the winner had
just installed, or find it half made. Real processes: the kit's fake llama-server."""

from __future__ import annotations

import trio

from inferactors import InferConfig, InferenceSpec, InferRuntime, InvalidState, open_runtime
from inferactors._actors.runtime import InstanceHandle
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port

LOADS = 50
ROUNDS = 3
"""Rounds of fifty, each on a spec of its own: the race lost once in a few rounds before."""


async def test_fifty_concurrent_loads_of_one_spec_leave_one_instance_and_its_directory(
    inferactors_kit: RuntimeKit,
) -> None:
    config = inferactors_kit.config()
    async with open_runtime(config) as runtime:
        for number in range(ROUNDS):
            await _round(runtime, inferactors_kit.spec(f"chat{number}", free_port()), config)


async def _round(runtime: InferRuntime, spec: InferenceSpec, config: InferConfig) -> None:
    won: list[InstanceHandle] = []
    refused: list[str] = []

    async def load() -> None:
        try:
            won.append(await runtime.load(spec))
        except InvalidState as error:
            refused.append(str(error))

    async with trio.open_nursery() as nursery:
        for _ in range(LOADS):
            nursery.start_soon(load)
    assert len(won) == 1, refused
    assert len(refused) == LOADS - 1
    assert all(why.endswith("is already loaded") for why in refused), set(refused)
    assert config.managed is not None
    directory = config.managed.data_root / won[0].instance_id
    assert directory.is_dir()
    await runtime.start(won[0])
    with trio.fail_after(20):
        await runtime.wait_state(won[0], InstanceState.RUNNING)
    assert directory.is_dir()
