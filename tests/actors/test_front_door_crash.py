"""An on-demand instance that crashes is not restarted by its supervisor behind the
ledger's back: its room may already be another model's. It becomes not loaded, and the
next request starts it through admission (MockClock, fake llama-servers)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from actors.front_door_support import door_rig
from inferactors import InferConfig, StopReason, Supervision
from inferactors._actors.front_door_seam import Residency
from inferactors._config.supervision import RestartPolicy
from inferactors._events import ResidencyStop
from inferactors.testing import FakeFleet

pytestmark = pytest.mark.usefixtures("inline_threads")

Config = Callable[[], InferConfig]
RESTARTING = Supervision(restart=RestartPolicy(max_restarts=5), readiness_timeout_s=60.0)


async def test_a_crashed_on_demand_instance_is_not_restarted_over_the_budget(
    make_config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    fleet = FakeFleet(footprint_mib=600)
    async with door_rig(make_config(), fleet, supervision=RESTARTING) as rig:
        first = await rig.door.acquire("a")
        fleet.last.crash(exit_code=1)
        first.done()
        await trio.sleep(0.5)
        assert rig.door.residency()["a"].residency is Residency.NOT_LOADED
        other = await rig.door.acquire("b")  # a's room goes to b
        await trio.sleep(120.0)  # long past any restart backoff
        assert rig.spawned("a") == 1  # never restarted behind the ledger
        assert not rig.alive("a")
        assert rig.alive("b")
        [stop] = rig.of(ResidencyStop, "a")
        assert stop.reason is StopReason.CRASH
        other.done()
        again = await rig.door.acquire("a")  # a request starts it: b is evicted first
        assert rig.spawned("a") == 2
        assert not rig.alive("b")
        assert rig.of(ResidencyStop, "b")[0].reason is StopReason.EVICTED
        again.done()
