"""The readiness lines the fake server prints on stderr, as the server it imitates does
(``_policy.ready_lines`` reads them).

Flavor ``llamacpp``, once its load is over (at once without ``--load-s``, never with
``--load-forever``), llama-server 0.3.36's::

    0.00.015.172 I srv  llama_server: model loaded
    0.00.015.203 I srv  llama_server: listening on http://127.0.0.1:18777

flavor ``mlx``, as it listens, mlx_lm.server 0.32.2's::

    2026-12-01 19:52:32,344 - INFO - Starting httpd at 127.0.0.1 on port 18778...

Like ``_fake_server``, this module imports nothing of the ``inferactors`` package but its
siblings (the program's bootstrap loads them without the package's ``__init__``).
"""

from __future__ import annotations

import sys
import threading
import time

from ._fake_faults import FakeServerOptions

_STARTED = time.monotonic()
_NEVER = threading.Event()


def say_ready(options: FakeServerOptions, load_left_s: float | None) -> None:
    """Print the readiness lines of ``options.flavor``, the llama lines after ``load_left_s``
    float seconds (None: the load never ends, nothing is printed). Blocks: run it in a
    thread of its own."""
    if options.flavor == "mlx":
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        _say(f"{stamp},{int(now * 1000) % 1000:03d} - INFO - Starting httpd at {options.host}"
             f" on port {options.port}...")  # fmt: skip
        return
    if load_left_s is None:
        return
    _NEVER.wait(load_left_s)
    host = f"[{options.host}]" if ":" in options.host else options.host
    _say(f"{_llama_stamp()} I srv  llama_server: model loaded")
    _say(f"{_llama_stamp()} I srv  llama_server: listening on http://{host}:{options.port}")


def _llama_stamp() -> str:
    """llama.cpp's log prefix: minutes, seconds, milliseconds, microseconds since start."""
    micros = int((time.monotonic() - _STARTED) * 1e6)
    minutes, micros = divmod(micros, 60_000_000)
    seconds, micros = divmod(micros, 1_000_000)
    return f"{minutes}.{seconds:02d}.{micros // 1000:03d}.{micros % 1000:03d}"


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # nobody reads our output any more
