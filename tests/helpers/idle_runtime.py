"""Test helper: a supervisor process that holds a data_root and does nothing else.

Usage: python idle_runtime.py DATA_ROOT. Opens a managed llama.cpp runtime on DATA_ROOT
(registry DATA_ROOT/models.json, no instance), prints ``ready`` on one line of stdout once
it is open, then sleeps until killed. Whatever `open_runtime` raises is printed as
``refused: <message>`` and the exit status is 3.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from inferactors import InferactorsError, InferConfig, InferFlavor, ManagedConfig, open_runtime


async def _main(data_root: Path) -> int:
    managed = ManagedConfig(registry=data_root / "models.json", data_root=data_root)
    try:
        async with open_runtime(InferConfig.managing(InferFlavor.LLAMACPP, managed)):
            print("ready", flush=True)
            await trio.sleep_forever()
    except InferactorsError as error:
        print(f"refused: {error}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(_main, Path(sys.argv[1])))
