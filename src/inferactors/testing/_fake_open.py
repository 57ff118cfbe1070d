"""`open_fake_server`: a fake llama-server or mlx_lm.server for the length of an ``async
with`` block, in any trio test (no pytest fixture needed)."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ._fake_faults import FakeServerFaults, Flavor
from ._fake_processes import FakeServer, _launch_server
from ._timeline import Timeline


@asynccontextmanager
async def open_fake_server(
    *,
    flavor: Flavor = "llamacpp",
    faults: FakeServerFaults | None = None,
    timeline: Timeline | None = None,
    model: str = "tiny.gguf",
    directory: Path | None = None,
) -> AsyncIterator[FakeServer]:
    """Run a fake server on a free 127.0.0.1 port for the block; yield it once it listens
    (about 0.1 s): its address is ``fake.base_url`` (``http://127.0.0.1:<port>``), what it
    received ``fake.requests()``.

    It plays ``faults`` (the program's flags as a value: ``FakeServerFaults(fail_status=503,
    fail_to=2)``, ``FakeServerFaults(reset_at=1)``, ``cut_body_after``, ``cut_stream_after``,
    ``stream_token_delay_s`` ...) or the steps of ``timeline``, not both; a
    ``fake.restart()`` plays ``timeline`` (none when ``faults`` was given). Its pid file,
    request log and stderr go in ``directory`` (default: a temporary directory, removed on
    exit). Leaving the block, however it ends (an exception, a cancellation), kills it
    (SIGKILL to its process group) and reaps it. Starting and stopping run in a worker
    thread, so the trio loop is not blocked.

    Raises:
        ValueError: both ``faults`` and ``timeline`` were given.
        InvalidConfig: a step of ``timeline`` the fake of ``flavor`` cannot play.
        FakeStartError: it exited or did not listen within ``STARTUP_S`` (30 s).
    """
    if faults is not None and timeline is not None:
        raise ValueError("open_fake_server: give faults or a timeline, not both")
    chosen = timeline or Timeline()
    played = faults if faults is not None else chosen.server_faults(flavor)
    with tempfile.TemporaryDirectory(prefix="inferactors-fake-") as scratch:
        where = directory if directory is not None else Path(scratch)
        fake = await trio.to_thread.run_sync(
            lambda: _launch_server(where, flavor, chosen, played, model, None)
        )
        try:
            yield fake
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(fake.stop)
