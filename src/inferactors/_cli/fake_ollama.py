"""``python -m inferactors.testing.fake_ollama``: the fake Ollama daemon as a program.

The fake itself (`FakeOllama`, `serve_fake_ollama`) is in `inferactors.testing`; this is
only its command line, kept here because `_cli` is the one place that calls ``trio.run``.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence

import trio

from ..testing._fake_ollama import FakeOllama, serve_fake_ollama
from ..testing._fake_ollama_api import FakeOllamaConfig

ORPHAN_CHECK_S = 0.1
"""How often the program checks that the process that started it is alive."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inferactors.testing.fake_ollama --port P --model NAME ...``: serve a fake
    Ollama on 127.0.0.1:P until interrupted, or until the process that started it dies
    (checked every 0.1 s; not with ``--outlive-parent``)."""
    launcher = os.getppid()
    args = _parser().parse_args(argv)
    config = FakeOllamaConfig(
        models=tuple(args.model or ["tiny:latest"]),
        version=args.ollama_version,
        load_delay_s=args.load_delay,
        load_error=args.load_error,
        unload_linger_s=args.unload_linger,
        preloaded=tuple(args.preloaded),
    )
    try:
        trio.run(_serve_forever, config, args.port, None if args.outlive_parent else launcher)
    except* KeyboardInterrupt:  # Ctrl-C, bare or wrapped by the nursery: a clean stop
        pass
    return 0


async def _serve_forever(config: FakeOllamaConfig, port: int, launcher: int | None) -> None:
    """Serve until SIGINT or SIGTERM (heard as signals, so Ctrl-C cancels every connection
    cleanly instead of landing as KeyboardInterrupt inside one), or until orphaned."""
    fake = FakeOllama.create(config)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(serve_fake_ollama, fake, port)
            fake.port = listeners[0].socket.getsockname()[1]
            print(f"fake ollama listening on {fake.base_url}", flush=True)
            if launcher is not None:
                nursery.start_soon(_cancel_when_orphaned, launcher, nursery.cancel_scope)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


async def _cancel_when_orphaned(launcher: int, scope: trio.CancelScope) -> None:
    await _until_orphaned(launcher)
    scope.cancel()


async def _until_orphaned(launcher: int) -> None:
    """Return once our parent is no longer ``launcher`` (it died: we were reparented)."""
    while True:
        await trio.sleep(ORPHAN_CHECK_S)
        if os.getppid() != launcher:
            return


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inferactors.testing.fake_ollama",
        description="A fake Ollama daemon on 127.0.0.1 for tests and examples.",
    )
    parser.add_argument("--port", type=int, default=11434, help="TCP port (0: any free one)")
    parser.add_argument("--model", action="append", help="a pulled tag (repeatable)")
    parser.add_argument("--preloaded", action="append", default=[], help="already loaded tag")
    parser.add_argument("--ollama-version", default="0.5.1", help="what /api/version says")
    parser.add_argument("--load-delay", type=float, default=0.0, help="seconds each load takes")
    parser.add_argument("--load-error", help="fail every load with this error text (HTTP 500)")
    parser.add_argument("--unload-linger", type=float, default=0.0, help="seconds in /api/ps")
    parser.add_argument(
        "--outlive-parent", action="store_true", help="keep serving when the parent dies"
    )
    return parser
