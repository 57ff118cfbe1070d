"""The ``inferactors`` command's first step: signals heard before anything heavy loads.

Importing the ``inferactors`` package takes about half a second (trio, httpx, starlette,
prometheus-client, ...). Until ``inferactors run`` listens with trio, a SIGHUP (a systemd
reload) would kill it with the default action and a SIGINT would print a traceback. So
`main`, the console script, installs `EARLY` for ``run`` before that import: SIGINT and
SIGTERM are remembered as a stop, SIGHUP as a pending reload. ``inferactors run`` reads
them once trio's receiver listens (``inferactors._cli.run``). A signal that arrives before
the interpreter runs this module (its first ~20 ms) still gets the default action.

This module imports nothing of ``inferactors`` and nothing slow.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

HEARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals remembered until ``inferactors run`` listens itself."""


class EarlySignals:
    """A signal handler that only remembers: `heard` lists the signal numbers, in order."""

    def __init__(self) -> None:
        self.heard: list[int] = []
        self.installed = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.heard.append(signum)

    def install(self) -> None:
        """Handle `HEARD` with this (once; later calls do nothing)."""
        if not self.installed:
            for signum in HEARD:
                signal.signal(signum, self)
            self.installed = True

    def stop_heard(self) -> int | None:
        """The first SIGINT or SIGTERM heard, if any."""
        return next((s for s in self.heard if s in (signal.SIGINT, signal.SIGTERM)), None)

    def take_reload(self) -> bool:
        """Whether a SIGHUP was heard since the last call (it is consumed)."""
        found = signal.SIGHUP in self.heard
        self.heard = [s for s in self.heard if s != signal.SIGHUP]
        return found


EARLY = EarlySignals()
"""The one early handler of this process."""


def main() -> int:
    """The ``inferactors`` console script: `EARLY` for ``run``, then the real command."""
    if sys.argv[1:2] == ["run"]:
        EARLY.install()
    if sys.argv[1:] == ["--version"]:  # the version alone: no parser, no HTTP client
        from inferactors._version import package_version

        print(f"inferactors {package_version()}")
        return 0
    from inferactors._cli.main import main as cli_main

    return cli_main()
