"""``inferactors run`` sends an adopted server only GET requests unless its entry asks for
deep health (``supervision.watchdog``): the run's one-token proof at first serve is for
managed servers and for adopted ones that asked, never a completion generated on somebody
else's server unasked. Real processes: the CLI and two fake llama-servers recording what
they receive."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from inferactors.testing import start_fake_server
from support import own_state_dir_env

RUN_FILE = """
node_id = "gets"

[[instances]]
mode = "adopted"
role = "plain"
runtime = "infer.llamacpp"
serve = {{ port = {plain} }}

[[instances]]
mode = "adopted"
role = "watched"
runtime = "infer.llamacpp"
serve = {{ port = {watched} }}
supervision = {{ watchdog = {{ interval_s = 600 }} }}
"""


def test_an_adopted_server_gets_only_gets_unless_it_asked_for_deep_health(
    tmp_path: Path,
) -> None:
    plain = start_fake_server(tmp_path / "plain")
    watched = start_fake_server(tmp_path / "watched")
    try:
        path = tmp_path / "run.toml"
        path.write_text(RUN_FILE.format(plain=plain.port, watched=watched.port))
        argv = [sys.executable, "-m", "inferactors", "run", str(path)]
        env = own_state_dir_env(tmp_path)
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        ) as run:
            assert run.stdout is not None
            lines: list[str] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(_proved(s) for s in lines):
                lines.append(run.stdout.readline())
            time.sleep(1.0)  # the plain one's would-be completion, had it been sent
            run.send_signal(signal.SIGINT)
            rest, _ = run.communicate(timeout=30)
        said = "".join(lines) + rest
        assert any(_proved(s) for s in lines), said
        assert "plain  deep health" not in said, said
        posts = [r for r in watched.requests() if r.method == "POST"]
        assert [r.path for r in posts][:1] == ["/v1/chat/completions"], watched.requests()
        methods = {(r.method, r.path) for r in plain.requests()}
        assert methods, "the plain one was never probed"
        assert all(method == "GET" for method, _ in methods), methods
    finally:
        plain.stop()
        watched.stop()


def _proved(line: str) -> bool:
    return "watched  deep health: one token " in line
