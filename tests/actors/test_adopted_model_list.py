"""Issue 8 item 9, "Truthful", through the runtime: an adopted llama-server whose ``/health``
says ok but whose ``/v1/models`` is a nesting bomb, holds entries of the wrong types or
answers too late is Degraded with the reason in the server's words, not Running "server
up", while a healthy sibling on the same runtime stays Running. The server is a real
loopback HTTP server (`edges.hostile_server_support`).
"""

from __future__ import annotations

import pytest

from edges.hostile_server_support import Reply, hostile_server, nesting_bomb
from inferactors import InferConfig, InferenceSpec, InferFlavor, ServeArgs, open_runtime
from inferactors._status import InstanceState

HEALTHY = {
    "/health": Reply(body=b'{"status": "ok"}'),
    "/v1/models": Reply(body=b'{"object": "list", "data": [{"id": "tiny"}]}'),
}

CASES = {
    "nesting-bomb": (
        Reply(body=nesting_bomb()),
        "model list unreadable: /v1/models body is not a JSON object: "
        "JSON nested deeper than 64 levels at line 1, column 65",
    ),
    "wrong-types": (
        Reply(body=b'{"data": [{"id": ["tiny"]}, {"id": {"a": 1}}, null, 3]}'),
        'model list unreadable: /v1/models lists no model with a string "id" or "name"',
    ),
    "late": (
        Reply(body=b'{"data": [{"id": "tiny"}]}', chunk=4, pause_s=0.2),
        "model list unreadable: GET /v1/models: no complete reply within 0.5 s",
    ),
}


def spec(role: str, port: int) -> InferenceSpec:
    return InferenceSpec(
        role=role,
        runtime=InferFlavor.LLAMACPP,
        model="tiny",
        serve=ServeArgs(host="127.0.0.1", port=port),
    )


@pytest.mark.parametrize("case", sorted(CASES))
async def test_an_unreadable_model_list_is_degraded_not_running(case: str) -> None:
    reply, why = CASES[case]
    config = InferConfig.adopted(InferFlavor.LLAMACPP, probe_timeout_s=0.5)
    async with (
        hostile_server({**HEALTHY, "/v1/models": reply}) as hostile,
        hostile_server(HEALTHY) as healthy,
        open_runtime(config) as runtime,
    ):
        target = await runtime.load(spec("hostile", hostile.port))
        sibling = await runtime.load(spec("sibling", healthy.port))
        await runtime.start(target)
        await runtime.start(sibling)
        status = runtime.status(target)
        assert (status.state, status.detail) == (InstanceState.DEGRADED, why)
        report = await runtime.health(target)
        assert (report.models, report.models_problem) == ((), why)
        assert (runtime.status(sibling)).state is InstanceState.RUNNING
