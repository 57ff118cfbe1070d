"""The supervisor side of the web page's tests: a real ``inferactors run`` (`PageRun`) with
the real llama-server on the tiny model (``chat``) and a fake that crash-loops
(``flaky``), started with the README's flags (`readme_commands`): its control API on a
loopback port with a token. The browser side is ``web_page_browser.py``."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from cli.run_support import RunProcess
from e2e.readme_blocks_support import README, shell_commands
from inferactors._models.registry import ModelRegistry
from inferactors.testing import Workspace
from inferactors.testing._fake_faults import FakeServerFaults
from inferactors.testing._fake_server import write_fake_server_program
from support import run_as_line

CRASH_AFTER_S = 3.0
"""How long the crash-looping fake serves before it crashes, each time."""
START_S = 90.0
"""Deadline for the supervisor and both servers to come up on a busy machine."""

RUN_FILE = """\
node_id = "page"

[managed]
registry = "{registry}"
data_root = "{state}"
serve_programs = {{ "infer.llamacpp" = "{llama}", "infer.mlx-lm" = "{fake}" }}
restart = {{ max_restarts = 10000, base_s = 0.3, cap_s = 0.6, intensity = 10000, jitter = 0.0 }}
{run_as}
[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {chat_port} }}

[[instances]]
mode = "managed"
role = "flaky"
runtime = "infer.mlx-lm"
model = "tiny-mlx"
serve = {{ port = {flaky_port} }}
required = false
"""


README_RUN_FILE = "operate.toml"
"""The run file the README's web page commands name (the Operate session's)."""
README_PORT = "8765"
README_TOKEN_FILE = "token"


def readme_section() -> str:
    """The README's web page commands and what is around them (between its markers)."""
    text = README.read_text()
    begin = text.index("<!-- web-page:begin")
    return text[begin : text.index("<!-- web-page:end -->", begin)]


def readme_commands(run_file: Path, token_file: Path) -> dict[str, list[str]]:
    """The section's ``inferactors`` commands by subcommand (``ui``, ``run``), made local:
    ``run_file`` for the README's, a free port (0) for its port, ``token_file`` for its."""
    local = {README_RUN_FILE: str(run_file), README_PORT: "0", README_TOKEN_FILE: str(token_file)}
    commands = [argv for argv in shell_commands(readme_block()) if argv[0] == "inferactors"]
    return {argv[1]: [local.get(word, word) for word in argv] for argv in commands}


def readme_block() -> str:
    """The section's one ``sh`` block."""
    (block,) = readme_section().split("```sh\n")[1:]
    return block.split("```")[0]


def readme_token_recipe() -> list[str]:
    """The block's lines that are not ``inferactors`` commands (nor comments): the
    token file's recipe, as written."""
    lines = [line.split("#")[0].strip() for line in readme_block().splitlines()]
    return [line for line in lines if line and not line.startswith("inferactors ")]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.define(eq=False)
class PageRun:
    """A running supervisor of ``chat`` and ``flaky``, its TCP address and token."""

    run: RunProcess
    where: Path
    run_file: Path
    base_url: str
    token: str

    @property
    def page_url(self) -> str:
        """The page's address with the token in its fragment."""
        return f"{self.base_url}/ui/#token={self.token}"

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``inferactors ARGV --state-dir <its state>``, the real CLI in its own process."""
        return subprocess.run(
            [sys.executable, "-m", "inferactors", *argv, "--state-dir", str(self.state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    @property
    def state_dir(self) -> Path:
        return self.where / "state"

    def views(self) -> dict[str, dict[str, Any]]:
        """Every instance's view, as ``inferactors status --json`` prints it."""
        done = self.cli("status", "--json")
        assert done.returncode == 0, done.stderr
        return {view["name"]: view for view in json.loads(done.stdout)}

    def wait_view(self, name: str, check: Any, within_s: float = START_S) -> dict[str, Any]:
        """The view of ``name`` once ``check(view)`` holds."""
        deadline = time.monotonic() + within_s
        while True:
            view = self.views()[name]
            if check(view):
                return view
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} never got there: {view}")
            time.sleep(0.2)


@contextmanager
def page_run(
    workspace: Workspace, llama_server: Path, tiny_gguf: Path, tiny_mlx: Path
) -> Iterator[PageRun]:
    """Start the supervisor, wait until ``chat`` runs, yield it; stop it (SIGTERM) after."""
    where = workspace.directory("page")
    registry = where / "models.json"
    models = ModelRegistry.open(registry)
    models.add(tiny_gguf, name="tiny")
    models.add(tiny_mlx, name="tiny-mlx")
    fake = write_fake_server_program(
        where / "flaky-server",
        flavor="mlx",
        faults=FakeServerFaults(crash_after_s=CRASH_AFTER_S, exit_code=3, impostor="tiny-mlx"),
        python=workspace.python,
        sys_path=workspace.sys_path,
    )
    token = secrets.token_urlsafe(24)
    token_file = where / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    run_file = where / "run.toml"
    run_file.write_text(
        RUN_FILE.format(
            registry=registry,
            state=where / "state",
            llama=llama_server,
            fake=fake,
            run_as=run_as_line(workspace.run_as),
            chat_port=free_port(),
            flaky_port=free_port(),
        )
    )
    run_command = readme_commands(run_file, token_file)["run"]
    assert run_command[:3] == ["inferactors", "run", str(run_file)], run_command
    run = RunProcess.start(run_file, *run_command[3:])
    try:
        listening = run.wait_for("control API listening on", START_S)
        base_url = re.findall(r"http://127\.0\.0\.1:\d+", listening)[0]
        started = PageRun(run, where, run_file, base_url, token)
        started.wait_view("chat", lambda view: view["status"]["state"] == "running")
        yield started
    finally:
        run.process.terminate()
        try:
            run.finish(30.0)
        except AssertionError:
            pass
