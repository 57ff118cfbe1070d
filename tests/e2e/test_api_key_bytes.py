"""``serve.api_key_file`` against the real llama-server: what we send is exactly what it
accepts (issue 9 item 4). The pinned build takes the file's line before its ``\\n`` as the
key, byte for byte: a key file ending ``\\r\\n`` makes the key ``sk\\r``, which no client
can send, so such a file is refused at admission, naming the field, never the key."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest
import trio

from inferactors import open_runtime
from inferactors._config.config import InferConfig
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._edges.containment import resolve_run_as
from inferactors._errors import AdmissionRefused
from inferactors._flavor import InferFlavor
from inferactors._status import InstanceState
from support import Unprivileged

READY_S = 60.0


def keyed(port: int, path: Path) -> InferenceSpec:
    serve = ServeArgs(port=port, api_key_file=str(path))
    return InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)


def write_key(directory: Path, body: bytes, unprivileged: Unprivileged) -> Path:
    uid = resolve_run_as(unprivileged.run_as).uid if unprivileged.run_as else os.geteuid()
    path = directory / "api.key"
    path.write_bytes(body)
    os.chown(path, uid, -1)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("ending", [b"\n", b""])
async def test_a_key_with_or_without_its_newline_is_the_key_the_server_accepts(
    managed_config: InferConfig,
    free_port: int,
    server_dir: Path,
    unprivileged: Unprivileged,
    ending: bytes,
) -> None:
    key = "sk-" + secrets.token_hex(8)
    path = write_key(server_dir, key.encode() + ending, unprivileged)
    async with open_runtime(managed_config, node_id="test") as runtime:
        handle = await runtime.load(keyed(free_port, path))
        await runtime.start(handle)
        with trio.fail_after(READY_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)  # the first token had it
        assert (await runtime.deep_health(handle)).text
        await runtime.stop(handle, 5.0)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"KEY\r\n", "holds a carriage return (\\r, a Windows line ending)"),
        (b"KEY\r", "holds a carriage return (\\r, a Windows line ending)"),
        (b"KEY\x1b\n", "holds a control or non-ASCII character"),
        ("KEYé\n".encode(), "holds a control or non-ASCII character"),
    ],
)
async def test_a_key_the_server_would_not_match_is_refused_at_admission(
    managed_config: InferConfig,
    free_port: int,
    server_dir: Path,
    unprivileged: Unprivileged,
    body: bytes,
    said: str,
) -> None:
    key = "sk-" + secrets.token_hex(8)
    path = write_key(server_dir, body.replace(b"KEY", key.encode()), unprivileged)
    async with open_runtime(managed_config, node_id="test") as runtime:
        with pytest.raises(AdmissionRefused) as refused:
            await runtime.admit(keyed(free_port, path))
    message = str(refused.value)
    assert message.startswith(f"serve.api_key_file {path}: {said}")
    assert key not in message


async def test_the_real_server_keeps_the_carriage_return_in_its_key(
    llama_server: Path, tiny_gguf: Path, free_port: int, tmp_path: Path
) -> None:
    """Why a ``\\r`` is refused: the pinned llama-server refuses ``sk`` from ``sk\\r\\n``."""
    path = tmp_path / "crlf.key"
    path.write_bytes(b"sk-crlf\r\n")
    argv = [str(llama_server), "-m", str(tiny_gguf), "--host", "127.0.0.1"]
    argv += ["--port", str(free_port), "--api-key-file", str(path)]
    quiet = subprocess.DEVNULL
    server = await trio.lowlevel.open_process(argv, stdout=quiet, stderr=quiet)
    base = f"http://127.0.0.1:{free_port}"
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
            with trio.fail_after(READY_S):
                while not await _up(client, base):  # noqa: ASYNC110  (no event says "up")
                    await trio.sleep(0.1)
            sent = {"Authorization": "Bearer sk-crlf"}
            assert (await client.get(f"{base}/v1/models", headers=sent)).status_code == 401
    finally:
        server.kill()
        with trio.CancelScope(shield=True):
            await server.wait()


async def _up(client: httpx.AsyncClient, base: str) -> bool:
    try:
        return (await client.get(f"{base}/health")).status_code == 200
    except httpx.TransportError:
        return False
