"""The control API's routes over a fake fleet, through httpx's ASGI transport (no socket):
JSON shapes, the error mapping, the probes and the bearer token on TCP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from inferactors._errors import BackendError, InvalidConfig
from inferactors._events import StateChanged
from inferactors._service.control_app import ReadOnly, control_app
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState
from service.control_support import FakeFleet, crash


def client(fleet: FakeFleet, **options: Any) -> httpx.AsyncClient:
    raise_errors = options.pop("raise_app_exceptions", True)
    transport = httpx.ASGITransport(
        control_app(fleet, **options), raise_app_exceptions=raise_errors
    )
    return httpx.AsyncClient(transport=transport, base_url="http://control")


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_instances_lists_every_view_with_every_status_field() -> None:
    async with client(FakeFleet()) as http:
        reply = await http.get("/v1/instances")
    assert reply.status_code == 200
    chat, embed = reply.json()["instances"]
    assert (chat["name"], chat["flavor"], chat["mode"]) == ("chat", "infer.llamacpp", "managed")
    assert chat["instance_id"] == "id-chat"
    assert chat["refused"] is None
    assert chat["status"]["state"] == "running"
    assert chat["status"]["pid"] == 101
    assert chat["status"]["detail"] is None  # present though at its default
    assert chat["status"]["last_lines"] == []
    assert embed["name"] == "embed"


async def test_one_instance_and_an_unknown_one() -> None:
    async with client(FakeFleet()) as http:
        found = await http.get("/v1/instances/embed")
        missing = await http.get("/v1/instances/nope")
    assert found.json()["status"]["pid"] == 102
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {"code": "unknown-instance", "message": "no instance named 'nope'"}
    }


async def test_stop_start_restart_answer_the_view_after_and_touch_only_that_one() -> None:
    fleet = FakeFleet()
    async with client(fleet) as http:
        stopped = await http.post("/v1/instances/chat/stop")
        started = await http.post("/v1/instances/chat/start")
        restarted = await http.post("/v1/instances/chat/restart")
        refused = await http.post("/v1/instances/embed/start")
        wrong_method = await http.get("/v1/instances/chat/stop")
    assert stopped.json()["status"]["state"] == "exited"
    assert stopped.json()["status"]["stop_reason"] == "requested"
    assert started.json()["status"]["state"] == "running"
    assert restarted.status_code == 200
    assert fleet.calls == ["stop chat", "start chat", "restart chat"]
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "invalid-state"
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method-not-allowed"


async def test_reload_answers_what_changed_or_400_with_the_config_error() -> None:
    fleet = FakeFleet()
    async with client(fleet) as http:
        applied = await http.post("/v1/reload")
        fleet.reload_error = InvalidConfig("run.toml: $.instances[0].serve.port: expected int")
        refused = await http.post("/v1/reload")
    assert applied.json() == {
        "added": ["new"],
        "removed": [],
        "changed": ["chat"],
        "unchanged": ["embed"],
        "revived": [],
        "refused": {},
        "tampered": {},
        "applied": [],
    }
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "invalid-config",
        "message": "run.toml: $.instances[0].serve.port: expected int",
    }


async def test_log_tail_is_ndjson_of_the_last_n_lines() -> None:
    fleet = FakeFleet()
    for index in range(5):
        fleet.add_line("chat", f"line {index}")
    async with client(fleet) as http:
        tail = await http.get("/v1/instances/chat/logs", params={"lines": 2})
        default = await http.get("/v1/instances/chat/logs")
        bad = await http.get("/v1/instances/chat/logs", params={"lines": "-1"})
        unknown = await http.get("/v1/instances/nope/logs")
    assert tail.headers["content-type"] == "application/x-ndjson"
    assert ndjson(tail.text) == [
        {"at": 1_700_000_000.5, "stream": "stderr", "pid": 101, "text": t, "continued": False}
        for t in ("line 3", "line 4")
    ]
    assert len(ndjson(default.text)) == 5
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid-config"
    assert unknown.status_code == 404


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
async def test_follow_off_in_any_usual_word_is_a_plain_tail(value: str) -> None:
    fleet = FakeFleet()
    fleet.add_line("chat", "only")
    async with client(fleet) as http:
        logs = await http.get("/v1/instances/chat/logs", params={"follow": value})
        events = await http.get("/v1/events", params={"follow": value})
    assert [line["text"] for line in ndjson(logs.text)] == ["only"]
    assert (logs.status_code, events.status_code, fleet.open_follows) == (200, 200, 0)


@pytest.mark.parametrize("value", ["", "2", "y", "maybe", "truee", "none"])
async def test_a_follow_that_is_no_boolean_is_400_on_every_route(value: str) -> None:
    async with client(FakeFleet()) as http:
        logs = await http.get("/v1/instances/chat/logs", params={"follow": value})
        events = await http.get("/v1/events", params={"follow": value})
    for reply in (logs, events):
        assert reply.status_code == 400
        assert reply.json()["error"] == {
            "code": "invalid-config",
            "message": "follow must be one of 1, true, yes, on, 0, false, no, off",
        }


async def test_events_are_typed_ndjson_through_the_converter() -> None:
    fleet = FakeFleet()
    fleet.add_event(StateChanged("id-chat", InstanceState.LOADED, InstanceState.RUNNING, None, 1))
    fleet.add_event(crash())
    async with client(fleet) as http:
        both = ndjson((await http.get("/v1/events")).text)
        last = ndjson((await http.get("/v1/events", params={"since": 1})).text)
    assert [event["type"] for event in both] == ["StateChanged", "ProcessExited"]
    assert both[0]["new"] == "running"
    assert isinstance(last[0].pop("wall_time"), float)  # the wall clock beside "at"
    assert last == [
        {
            "type": "ProcessExited",
            "instance_id": "id-chat",
            "pid": 101,
            "exit_code": 1,
            "signal": None,
            "reason": "crash",
            "at": 5.0,
            "name": "chat",
            "survivors": [],
            "diagnosis": None,
            "last_lines": ["boom", "bye"],
        }
    ]


async def test_metrics_are_prometheus_text() -> None:
    async with client(FakeFleet()) as http:
        reply = await http.get("/metrics")
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "inferactors_up 1.0" in reply.text


async def test_livez_is_200_when_the_tree_answers_and_503_when_late_or_dead() -> None:
    fleet = FakeFleet()
    async with client(fleet, live_deadline_s=0.2) as http:
        alive = await http.get("/livez")
        fleet.alive_delay_s = 5.0
        before = trio.current_time()
        late = await http.get("/livez")
        waited = trio.current_time() - before
        fleet.alive_delay_s, fleet.is_alive = 0.0, False
        dead = await http.get("/livez")
    assert (alive.status_code, alive.text) == (200, "ok\n")
    assert late.status_code == 503
    assert "did not answer within 0.2 s" in late.text
    assert waited < 1.0
    assert dead.status_code == 503


async def test_readyz_names_the_instances_not_ready() -> None:
    fleet = FakeFleet()
    async with client(fleet) as http:
        ready = await http.get("/readyz")
        await http.post("/v1/instances/embed/stop")
        not_ready = await http.get("/readyz")
        one_ready = await http.get("/readyz/chat")
        one_not = await http.get("/readyz/embed")
        unknown = await http.get("/readyz/nope")
    assert (ready.status_code, ready.json()) == (
        200,
        {"ready": True, "not_ready": [], "reasons": {}},
    )
    assert (not_ready.status_code, not_ready.json()) == (
        503,
        {"ready": False, "not_ready": ["embed"], "reasons": {"embed": "exited"}},
    )
    assert one_ready.json() == {
        "name": "chat",
        "ready": True,
        "state": "running",
        "required": True,
        "reason": None,
    }
    assert (one_not.status_code, one_not.json()["state"]) == (503, "exited")
    assert one_not.json()["reason"] == "exited"
    assert unknown.status_code == 404


async def test_readyz_waits_only_for_required_instances() -> None:
    fleet = FakeFleet(optional={"embed"})
    async with client(fleet) as http:
        await http.post("/v1/instances/embed/stop")
        ready = await http.get("/readyz")
        one = await http.get("/readyz/embed")
    assert (ready.status_code, ready.json()["not_ready"]) == (200, [])
    assert one.status_code == 503
    assert one.json()["required"] is False


async def test_the_read_only_app_answers_reads_and_refuses_commands() -> None:
    fleet = FakeFleet()
    app = ReadOnly(control_app(fleet))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inferactors") as http:
        listed = await http.get("/v1/instances")
        stop = await http.post("/v1/instances/chat/stop")
        reload = await http.post("/v1/reload")
    assert listed.status_code == 200
    assert (stop.status_code, stop.json()["error"]["code"]) == (403, "read-only")
    assert reload.status_code == 403
    assert fleet.calls == []  # nothing was done


class FailingFleet(FakeFleet):
    """A fleet whose restart fails as the tree says and whose stop has a bug."""

    async def restart(self, name: str, wait_s: float = 0.0) -> InstanceView:
        raise BackendError(f"{name}: the server did not stop")

    async def stop(self, name: str) -> InstanceView:
        raise RuntimeError("secret detail")


async def test_errors_of_the_tree_and_unforeseen_ones_are_json() -> None:
    async with client(FailingFleet(), raise_app_exceptions=False) as http:
        backend = await http.post("/v1/instances/chat/restart")
        bug = await http.post("/v1/instances/chat/stop")
        no_route = await http.get("/v2/nothing")
    assert backend.status_code == 500
    assert backend.json() == {
        "error": {"code": "backend", "message": "chat: the server did not stop"}
    }
    assert bug.status_code == 500
    assert bug.json()["error"]["code"] == "internal"
    assert "secret" not in bug.text
    assert no_route.status_code == 404
    assert no_route.json()["error"]["code"] == "not-found"


@pytest.mark.parametrize(
    ("headers", "client_address", "status"),
    [
        ({}, ("127.0.0.1", 5000), 401),
        ({"Authorization": "Bearer wrong-token-wrong-token"}, ("127.0.0.1", 5000), 401),
        ({"Authorization": "Bearer right-token-right-token"}, ("127.0.0.1", 5000), 200),
        ({"Authorization": "bearer right-token-right-token"}, ("127.0.0.1", 5000), 200),
        ({"Authorization": "BEARER  right-token-right-token"}, ("127.0.0.1", 5000), 200),
        ({"Authorization": "Basic right-token-right-token"}, ("127.0.0.1", 5000), 401),
        ({"Authorization": "right-token-right-token"}, ("127.0.0.1", 5000), 401),
        ({"Authorization": "Bearer right-token-right-tokenX"}, ("127.0.0.1", 5000), 401),
        ({}, None, 200),  # the Unix socket: no client address, no token needed
    ],
)
async def test_the_bearer_token_is_required_on_tcp_only(
    headers: dict[str, str], client_address: tuple[str, int] | None, status: int
) -> None:
    app = control_app(FakeFleet(), token="right-token-right-token")
    transport = httpx.ASGITransport(app, client=client_address)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
        reply = await http.get("/v1/instances", headers=headers)
    assert reply.status_code == status
    if status == 401:
        assert reply.json()["error"]["code"] == "unauthorized"
