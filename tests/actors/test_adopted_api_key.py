"""``serve.api_key_file`` on an adopted server is honoured: the key is read at its load as
for a managed server (a private regular file of one line, owned by us) and every probe
sends it, so a server started with ``--api-key`` is Running, not Degraded advising the very
setting it was given. A key file that cannot be used is refused at load, naming it; no
message holds the key. The server is a real loopback HTTP server that records each
request's headers (`edges.hostile_server_support`); the real llama-server's side is
``tests/e2e/test_api_key_refusal.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from edges.hostile_server_support import Reply, hostile_server
from inferactors import (
    AdmissionRefused,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    ServeArgs,
    open_runtime,
)
from inferactors._status import InstanceState

KEY = "sk-adopted-0123456789"
SERVER = {
    "/health": Reply(body=b'{"status": "ok"}'),
    "/v1/models": Reply(body=b'{"object": "list", "data": [{"id": "tiny"}]}'),
}


def spec(port: int, key_file: Path | None) -> InferenceSpec:
    serve = ServeArgs(port=port, api_key_file=None if key_file is None else str(key_file))
    return InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)


def key_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    path.chmod(mode)
    return path


async def test_an_adopted_servers_probes_carry_its_api_key(tmp_path: Path) -> None:
    async with (
        hostile_server(SERVER) as server,
        open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime,
    ):
        handle = await runtime.load(spec(server.port, key_file(tmp_path)))
        await runtime.start(handle)
        assert (runtime.status(handle)).state is InstanceState.RUNNING
        await runtime.health(handle)
        assert server.seen, "no request reached the server"
        assert {seen.get("authorization") for seen in server.seen} == {f"Bearer {KEY}"}


async def test_without_the_setting_no_key_is_sent(tmp_path: Path) -> None:
    async with (
        hostile_server(SERVER) as server,
        open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime,
    ):
        handle = await runtime.load(spec(server.port, None))
        await runtime.start(handle)
        await runtime.health(handle)
        assert all("authorization" not in seen for seen in server.seen)


@pytest.mark.parametrize(
    ("mode", "words"),
    [(0o644, "lets group or others read or write it; chmod 600 it")],
)
async def test_an_unusable_key_file_is_refused_at_load(
    tmp_path: Path, mode: int, words: str
) -> None:
    async with (
        hostile_server(SERVER) as server,
        open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime,
    ):
        with pytest.raises(AdmissionRefused) as refused:
            await runtime.load(spec(server.port, key_file(tmp_path, mode)))
        assert words in str(refused.value)
        assert f"serve.api_key_file {tmp_path / 'key'}" in str(refused.value)
        assert KEY not in str(refused.value)
        assert server.seen == []  # refused before any request
        with pytest.raises(AdmissionRefused, match=r"absent: cannot be opened: No such file"):
            await runtime.load(spec(server.port, tmp_path / "absent"))
