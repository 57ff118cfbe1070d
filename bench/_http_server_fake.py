"""A fake llama-server on Python's ``http.server`` (what mlx_lm.server is built on), for
``bench_readiness_servers.py``: HTTP/1.1 kept alive, headers and body in two writes with
Nagle left on, as the standard library sends them.

``python bench/_http_server_fake.py -m MODEL [--alias NAME] --host HOST --port PORT ...``
(other flags ignored): ``GET /health`` 200, ``GET /v1/models`` lists NAME (the alias, else
MODEL), ``POST /v1/chat/completions`` one token; it prints llama-server's readiness line
once it listens. Not a benchmark itself.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _flag(name: str, default: str = "") -> str:
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args else default


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served = ""

    def _reply(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply({"status": "ok"})
        elif self.path == "/v1/models":
            self._reply({"object": "list", "data": [{"id": self.served, "object": "model"}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {"role": "assistant", "content": " hi"}
        self._reply({"choices": [{"index": 0, "message": message, "finish_reason": "length"}]})

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> int:
    Handler.served = _flag("--alias") or _flag("-m")
    host, port = _flag("--host", "127.0.0.1"), int(_flag("--port", "8080"))
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print(f"main: server is listening on http://{host}:{port} - starting the main loop", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
