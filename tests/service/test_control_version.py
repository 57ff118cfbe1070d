"""``GET /v1`` and ``GET /v1/version`` (issue 19 item 5): what a client may ask first, the
package's version (as its metadata says) and every route with its methods."""

from __future__ import annotations

from importlib.metadata import version

import httpx

from inferactors._service.control_app import control_app
from service.control_support import FakeFleet


def client() -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=control_app(FakeFleet()))
    return httpx.AsyncClient(transport=transport, base_url="http://inferactors")


async def test_version_names_the_package_and_the_api() -> None:
    async with client() as http:
        reply = await http.get("/v1/version")
    assert reply.status_code == 200
    assert reply.json() == {"name": "inferactors", "version": version("inferactors"), "api": "v1"}


async def test_the_index_lists_every_route_with_its_methods() -> None:
    async with client() as http:
        index = (await http.get("/v1")).json()
    assert (index["api"], index["version"]) == ("v1", version("inferactors"))
    routes = {route["path"]: route["methods"] for route in index["routes"]}
    assert routes["/v1/instances/{name}/stop"] == ["POST"]
    assert routes["/v1/instances"] == ["GET", "HEAD"]
    assert {"/v1", "/v1/version", "/metrics", "/livez", "/readyz/{name}"} <= set(routes)
    assert len(routes) == 14
