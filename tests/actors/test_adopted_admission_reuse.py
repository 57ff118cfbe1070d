"""An adopted start reuses what admission just found (at 1,000 adopted servers each
admission made three probes: the plan's, the start's check and the monitor's first, when
the CPU was shortest): while the admission's report is at most `ADMISSION_REUSE_S` old,
the start's check and the monitor's first probe take it; older, they probe.

MockClock; the fake llama-server seen through httpx (``actors.adopted_support``).
"""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.adopted_support import FakeLlama, adopted, chat
from inferactors import BackendError, InstanceState
from inferactors._actors.instance.probing import ADMISSION_REUSE_S


def healths(server: FakeLlama) -> int:
    return server.paths.count("/health")


async def test_a_start_right_after_admission_probes_nothing_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, quiet_net=True) as runtime:
        handle = await runtime.load(chat())
        assert healths(server) == 1  # the admission's probe
        await runtime.start(handle)
        await trio.lowlevel.checkpoint()  # the monitor begins: its first probe is the admission's
        assert healths(server) == 1
        assert (runtime.status(handle)).state is InstanceState.RUNNING
        await trio.sleep(10.5)  # its ticks: 1, 2 ... 10 s (phase 0, the runtime's first)
        assert healths(server) == 1 + 10  # then every second on its phase


async def test_a_start_after_the_report_went_stale_probes_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeLlama()
    async with adopted(server, quiet_net=True) as runtime:
        handle = await runtime.load(chat())
        await trio.sleep(ADMISSION_REUSE_S + 0.5)
        server.down = True  # the start says so, not what admission saw
        with pytest.raises(BackendError, match="adopted server is not answering"):
            await runtime.start(handle)
        assert healths(server) == 2
