"""Test helper: a stand-in for llama-server that inferactors' managed runtime launches.

Run as ``python runtime_server.py -m MODEL --host H --port P [more llama-server args]``,
the argv inferactors builds. What it does is chosen by the environment variable
``RUNTIME_SERVER`` (set through ``ManagedConfig.env``), a comma-separated list of:

* ``serve``: answer HTTP on H:P: ``GET /health`` 200, ``GET /v1/models`` listing the
  model file's name (``--alias``'s, when given), ``POST /v1/chat/completions`` one token;
  anything else 404. Each request is printed to stdout as ``METHOD PATH``;
* ``silent``: never listen (a server still loading, or one that never binds);
* ``exit=CODE@SECONDS``: exit with status CODE after SECONDS;
* ``ignore-term``: ignore SIGTERM (inherited by a forked child);
* ``note-term``: on SIGTERM, write ``./term`` and exit with status 0;
* ``fork``: fork a child that sleeps 600 s in the same process group.

Every run writes its pid to ``./pid`` (once its SIGTERM handling is set up) and, with
``fork``, the child's pid to ``./child`` (in the working directory, the instance
directory), each through a rename.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path


def _write(name: str, value: int) -> None:
    staging = Path(f"{name}.tmp")
    staging.write_text(str(value))
    staging.rename(name)


def _note_term(signum: int, frame: object) -> None:
    _write("term", signum)
    os._exit(0)


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _handler(model: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # the request line goes to stdout instead

        def _reply(self, status: int, document: object) -> None:
            print(f"{self.command} {self.path}", flush=True)
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": model}]})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            if self.path != "/v1/chat/completions":
                self._reply(404, {"error": "not found"})
                return
            choice = {"message": {"role": "assistant", "content": " x"}, "finish_reason": "length"}
            self._reply(200, {"choices": [choice]})

    return Handler


def _serve(host: str, port: int, model: str) -> None:
    server = http.server.ThreadingHTTPServer((host, port), _handler(model))
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str]) -> None:
    modes = os.environ.get("RUNTIME_SERVER", "serve").split(",")
    if "ignore-term" in modes:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "note-term" in modes:
        signal.signal(signal.SIGTERM, _note_term)
    _write("pid", os.getpid())  # once the signal dispositions are in place
    if "fork" in modes:
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        _write("child", child)
    if "serve" in modes:
        model = Path(_arg(argv, "--alias" if "--alias" in argv else "-m")).name
        _serve(_arg(argv, "--host"), int(_arg(argv, "--port")), model)
    for mode in modes:
        if mode.startswith("exit="):
            code, after_s = mode.removeprefix("exit=").split("@")
            time.sleep(float(after_s))
            sys.stdout.flush()
            os._exit(int(code))
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1:])
