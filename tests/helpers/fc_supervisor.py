"""Test helper (FC-13): a whole supervisor process for the test to SIGKILL.

Usage: python fc_supervisor.py REGISTRY DATA_ROOT PROGRAM PORT [RUN_AS]. Opens a managed
llama.cpp runtime that runs PROGRAM (as RUN_AS when given), loads the registry's ``tiny``
model on 127.0.0.1:PORT, starts it, waits until it is Running, prints the server's pid on
one line of stdout, then sleeps until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    ManagedConfig,
    ServeArgs,
    open_runtime,
)


async def _main(
    registry: Path, data_root: Path, program: Path, port: int, run_as: str | None
) -> None:
    managed = ManagedConfig(
        registry=registry, data_root=data_root, serve_program=program, run_as=run_as
    )
    config = InferConfig.managing(InferFlavor.LLAMACPP, managed)
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )
    async with open_runtime(config, node_id="fc13") as runtime:
        handle = await runtime.load(spec)
        await runtime.start(handle)
        status = await runtime.wait_state(handle, InstanceState.RUNNING)
        print(status.pid, flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    user = args[4] if len(args) > 4 else None
    trio.run(_main, Path(args[0]), Path(args[1]), Path(args[2]), int(args[3]), user)
