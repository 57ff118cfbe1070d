"""Deep health under our own lateness (``_policy/lateness.py``): when the one-token check's
whole deadline (`Probing.one_token`) fires after our loop was blocked for most of it, the
check gives no verdict (`NoVerdict`), never `DeepHealthTimeout`; on time, a server that
does not answer is still the timeout it is.

Real time, a really blocked loop (a synchronous sleep), a real loopback server that never
finishes its completion (``edges.hostile_server_support``).
"""

from __future__ import annotations

import functools
import time

import pytest
import trio

from edges.hostile_server_support import Reply, hostile_server
from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs
from inferactors._actors.instance.probing import Probing
from inferactors._config.config import ControlMode
from inferactors._edges.bundle import Edges
from inferactors._errors import DeepHealthTimeout, NoVerdict
from inferactors._policy.admission import Plan
from inferactors._policy.lateness import LATE_S

TIMEOUT_S = 0.4
BLOCK_S = TIMEOUT_S + LATE_S + 0.3
NEVER = Reply(body=b'{"choices": []}' * 64, chunk=1, pause_s=5.0)  # one byte, then silence


async def _starve(seconds: float, *, after_s: float) -> None:
    await trio.sleep(after_s)
    time.sleep(seconds)  # noqa: ASYNC251 (the point: the loop is starved meanwhile)


def _probing(port: int) -> Probing:
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )
    plan = Plan(spec=spec, mode=ControlMode.ADOPTED, notes=())
    send, _ = trio.open_memory_channel[object](10)
    return Probing(plan, InferConfig.adopted(InferFlavor.LLAMACPP), Edges(), send)


async def test_a_deep_health_whose_deadline_our_stall_ate_gives_no_verdict() -> None:
    async with hostile_server({"/v1/chat/completions": NEVER}) as server:
        probing = _probing(server.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(_starve, BLOCK_S, after_s=0.05))
            with pytest.raises(NoVerdict, match="deep health"):
                await probing.one_token(TIMEOUT_S, listed=("tiny",))
        with pytest.raises(DeepHealthTimeout):  # on time: the server's own silence
            await probing.one_token(TIMEOUT_S, listed=("tiny",))
