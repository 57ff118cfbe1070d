"""Test helper: ignores SIGTERM (FC-05, FC-11), writes ./ready, then sleeps 600 s."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open("ready.tmp", "w") as ready:
    ready.write(str(os.getpid()))
os.rename("ready.tmp", "ready")
time.sleep(600)
