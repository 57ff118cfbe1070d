"""Who may ask what over TCP: the bearer token (the page's shell open to all, its data not),
a loopback Host only, and a browser's commands from the same origin only. A refused
command changes nothing."""

from __future__ import annotations

import httpx
import pytest

from inferactors._policy.browser_guard import loopback_host
from inferactors._service.control_app import control_app
from inferactors._service.ui_app import WebPage
from service.ui_support import PageFleet

TOKEN = "right-token-right-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
HERE = "http://127.0.0.1:8765"


def tcp_client(fleet: PageFleet, base_url: str = HERE) -> httpx.AsyncClient:
    app = control_app(fleet, token=TOKEN, page=WebPage(fleet))
    transport = httpx.ASGITransport(app, client=("127.0.0.1", 5000))
    return httpx.AsyncClient(transport=transport, base_url=base_url)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:8765", True),
        ("127.3.4.5", True),
        ("[::1]:8765", True),
        ("localhost:8765", True),
        ("LOCALHOST", True),
        ("evil.example:8765", False),
        ("10.0.0.1:8765", False),
        ("[::ffff:10.0.0.1]:80", False),
        ("", False),
        ("[::1", False),
    ],
)
def test_a_loopback_host(host: str, loopback: bool) -> None:
    assert loopback_host(host) is loopback


async def test_the_page_is_open_to_all_its_data_and_the_api_are_not() -> None:
    async with tcp_client(PageFleet()) as client:
        shell = [await client.get(path) for path in ("/ui/", "/ui/static/app.js")]
        closed = [
            await client.get(path)
            for path in ("/ui/api/instances/chat", "/ui/api/stream", "/v1/instances")
        ]
        opened = await client.get("/ui/api/instances/chat", headers=BEARER)
    assert [reply.status_code for reply in shell] == [200, 200]
    assert [reply.status_code for reply in closed] == [401, 401, 401]
    assert opened.status_code == 200


async def test_a_name_pointed_at_loopback_by_another_site_is_refused() -> None:
    async with tcp_client(PageFleet(), "http://evil.example:8765") as client:
        page = await client.get("/ui/")
        data = await client.get("/ui/api/instances/chat", headers=BEARER)
    assert [page.status_code, data.status_code] == [403, 403]
    assert data.json()["error"]["code"] == "bad-host"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "http://127.0.0.1:9999"}, 403),  # another port is another origin
        ({"Origin": "null"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Sec-Fetch-Site": "same-site"}, 403),
        ({"Origin": HERE, "Sec-Fetch-Site": "same-origin"}, 200),  # the page itself
        ({}, 200),  # not a browser (curl, a script): the token alone
    ],
)
async def test_a_command_from_another_origin_is_refused_and_changes_nothing(
    headers: dict[str, str], status: int
) -> None:
    fleet = PageFleet()
    async with tcp_client(fleet) as client:
        page = await client.post("/ui/api/instances/chat/stop", headers={**BEARER, **headers})
        api = await client.post("/v1/instances/chat/stop", headers={**BEARER, **headers})
    assert [page.status_code, api.status_code] == [status, status]
    if status == 403:
        assert page.json()["error"]["code"] == "cross-origin"
        assert fleet.calls == []
        assert fleet.view("chat").status.pid == 101
    else:
        assert fleet.calls == ["stop chat", "stop chat"]


async def test_a_command_without_the_token_is_refused_and_changes_nothing() -> None:
    fleet = PageFleet()
    async with tcp_client(fleet) as client:
        bare = await client.post("/ui/api/instances/chat/stop", headers={"Origin": HERE})
        wrong = await client.post(
            "/ui/api/reload", headers={"Origin": HERE, "Authorization": "Bearer nope-nope"}
        )
    assert [bare.status_code, wrong.status_code] == [401, 401]
    assert fleet.calls == []


async def test_a_read_from_another_origin_needs_the_token_all_the_same() -> None:
    async with tcp_client(PageFleet()) as client:
        stolen = await client.get("/ui/api/instances/chat", headers={"Origin": "http://evil"})
    assert stolen.status_code == 401
