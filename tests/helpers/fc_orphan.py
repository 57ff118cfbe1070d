"""Test helper (FC-13): an earlier life of a supervisor that dies and leaves its server behind.

Usage: python fc_orphan.py INSTANCE_DIR PORT ARGV... Starts ARGV (a server listening on
127.0.0.1:PORT) in a session of its own and without the parent-death signal, waits until
it accepts connections, records it in INSTANCE_DIR/server.json as the runtime does (with
this process as its supervisor), prints its pid on one line of stdout and exits, so the
server is orphaned and its recorded supervisor no longer exists.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from inferactors._edges.orphan_record import write_record

DEADLINE_S = 30.0


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def main(instance_dir: Path, port: int, argv: list[str]) -> None:
    server = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + DEADLINE_S
    while not _listening(port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            sys.exit(f"the server did not listen on port {port}")
        time.sleep(0.02)
    write_record(instance_dir, server.pid, port, argv)
    print(server.pid, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
