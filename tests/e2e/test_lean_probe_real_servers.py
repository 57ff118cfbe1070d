"""The lean probe wire (``_edges/probe_h11.py``) against the real servers: the real
llama-server (cpp-httplib, HTTP/1.1 kept alive) and the real mlx_lm.server (Python's
``http.server``, HTTP/1.0: a connection per request). Reports, model lists, the one-token
completion on a connection of its own, and how many connections the wire opened."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from importlib.util import find_spec
from pathlib import Path

import pytest
import trio

from inferactors import InferFlavor
from inferactors._edges.probe import ProbeClient
from inferactors._edges.probe_connect import tcp_connect
from inferactors._edges.probe_h11 import H11Wire
from inferactors._policy.probe_report import Up
from inferactors.testing._tiny_mlx import TINY_WORDS, write_tiny_mlx
from mlx_support import READY_S, is_up, mlx_server, wait_report

PROBES = 5


@pytest.fixture(scope="module")
def tiny_mlx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny mlx model at a symlink-free absolute path."""
    return write_tiny_mlx(tmp_path_factory.mktemp("models").resolve() / "tiny-mlx")


class Counted:
    """A `Connect` to 127.0.0.1:``port`` that counts the connections it opened."""

    def __init__(self, port: int) -> None:
        self.opened = 0
        self._connect = tcp_connect("127.0.0.1", port)

    async def __call__(self) -> trio.abc.Stream:
        self.opened += 1
        return await self._connect()


@pytest.fixture
async def llama_port(llama_server: Path, tiny_gguf: Path, free_port: int) -> AsyncIterator[int]:
    argv = [str(llama_server), "-m", str(tiny_gguf), "--host", "127.0.0.1"]
    process = await trio.lowlevel.open_process(
        [*argv, "--port", str(free_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        async with ProbeClient.open(f"http://127.0.0.1:{free_port}", timeout_s=2.0) as probe:
            with trio.fail_after(READY_S):
                while (await probe.report(InferFlavor.LLAMACPP)).health != Up():  # noqa: ASYNC110  the server's state, over HTTP
                    await trio.sleep(0.05)
        yield free_port
    finally:
        process.kill()
        await process.wait()


async def test_the_real_llama_server_is_probed_over_one_kept_connection(
    llama_port: int, tiny_gguf: Path
) -> None:
    connect = Counted(llama_port)
    base = f"http://127.0.0.1:{llama_port}"
    async with ProbeClient.open(base, timeout_s=5.0, connect=connect) as probe:
        assert isinstance(probe.wire, H11Wire)
        for _ in range(PROBES):
            report = await probe.report(InferFlavor.LLAMACPP)
            assert report.health == Up()
            assert report.lists(str(tiny_gguf))
            await trio.sleep(0.05)
        assert connect.opened == 1  # 10 GETs, one connection
        props = await probe.props()
        assert props is not None
        assert isinstance(props.get("build_info"), str)
        result = await probe.tiny_completion(None)
        assert result.finish_reason == "length"
        assert connect.opened == 2  # the POST on a connection of its own
        assert (await probe.report(InferFlavor.LLAMACPP)).health == Up()
        assert connect.opened == 2  # the GETs' connection is still kept


@pytest.mark.skipif(
    sys.platform != "linux" and find_spec("mlx_lm") is None,
    reason="mlx-lm is not installed on this platform (the dev extra installs it on Linux)",
)
async def test_the_real_mlx_lm_server_is_probed_a_connection_per_request(
    tiny_mlx: Path, free_port: int, tmp_path: Path
) -> None:
    program, model = Path(sys.executable).parent / "mlx_lm.server", tiny_mlx
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    async with mlx_server(program, model, free_port, cache, tmp_path / "server.log") as server:
        async with ProbeClient.open(server.base_url, timeout_s=READY_S) as waiting:
            await wait_report(waiting, server, is_up)
        connect = Counted(free_port)
        async with ProbeClient.open(server.base_url, timeout_s=5.0, connect=connect) as probe:
            for _ in range(PROBES):
                report = await probe.report(InferFlavor.MLX_LM)
                assert report.health == Up()
                assert report.models == (str(model),)
            assert connect.opened == 2 * PROBES  # HTTP/1.0: it closes after each reply
            result = await probe.tiny_completion(None)
        assert result.text.strip() in TINY_WORDS
        assert server.process.returncode is None
