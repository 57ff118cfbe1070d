"""Test helper: a stand-in for llama-server that answers one endpoint with a nesting bomb.

Run as ``python bomb_server.py -m MODEL --host H --port P [more llama-server args]``, the
argv inferactors builds. It answers like a healthy llama-server (``GET /health`` 200,
``GET /v1/models`` listing the model file's name, ``POST /v1/chat/completions`` one token),
except as the environment variable ``RUNTIME_SERVER`` (set through ``ManagedConfig.env``)
says: ``PATH@PORT`` makes the server on port PORT answer PATH with ``[[[...]]]`` 100,000
deep (200 KB), with status 503 for ``/health`` (the status whose body a probe reads) and
200 otherwise; servers on other ports stay healthy. Every request appends ``METHOD PATH``
(``BOMB METHOD PATH`` for a bomb) to ``./requests`` in the working directory (the
instance directory).
"""

from __future__ import annotations

import http.server
import json
import os
import sys
from pathlib import Path

DEPTH = 100_000


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _handler(model: str, target: str) -> type[http.server.BaseHTTPRequestHandler]:
    listed = {"object": "list", "data": [{"id": model}]}
    message = {"role": "assistant", "content": " x"}
    completion = {"choices": [{"message": message, "finish_reason": "length"}]}
    normal = {
        "/health": (200, b'{"status": "ok"}'),
        "/v1/models": (200, json.dumps(listed).encode()),
        "/v1/chat/completions": (200, json.dumps(completion).encode()),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _reply(self) -> None:
            bombed = self.path == target
            if bombed:
                status, body = (503 if target == "/health" else 200), b"[" * DEPTH + b"]" * DEPTH
            else:
                status, body = normal.get(self.path, (404, b'{"error": "not found"}'))
            with Path("requests").open("a") as log:
                log.write(f"{'BOMB ' if bombed else ''}{self.command} {self.path}\n")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._reply()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._reply()

    return Handler


def main(argv: list[str]) -> None:
    model = Path(_arg(argv, "--alias" if "--alias" in argv else "-m")).name  # -m: an fd path
    address = (_arg(argv, "--host"), int(_arg(argv, "--port")))
    path, _, port = os.environ.get("RUNTIME_SERVER", "").partition("@")
    handler = _handler(model, path if port == str(address[1]) else "")
    with http.server.ThreadingHTTPServer(address, handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
