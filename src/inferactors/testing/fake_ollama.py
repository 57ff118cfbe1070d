"""``python -m inferactors.testing.fake_ollama --port 11434 --model tiny``: the fake Ollama
daemon as a program (loopback only, until interrupted; Ctrl-C or SIGTERM exit 0).

Nothing imports this module, so ``-m`` runs it without runpy's "found in sys.modules"
warning; the in-process server is `inferactors.testing.open_fake_ollama`.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The program's entry point lives with the other programs, in `inferactors._cli`,
    # the only place that starts an event loop (`trio.run`).
    from inferactors._cli.fake_ollama import main

    sys.exit(main())
