"""The README's Operate session, run for real: its ``$`` commands in a fresh directory
holding ``examples/operate.toml``, the tiny model and the broken one (issue 10 item 10).

`run_session` runs each command as the README shows it (``bash -c``, with ``inferactors``
on ``PATH``): ``inferactors run ... &`` in the background, ``kill %1`` as SIGTERM to it.
Like a person at a terminal, it lets the fleet settle before each command (no instance
starting or waiting for a restart). `normalized` takes out what differs between runs
(times, pids, ports, ids, numbers, column widths) so a run can be compared with the README.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from e2e.readme_blocks_support import README, ROOT, console_commands, readme_blocks

INFERACTORS_BIN = Path(sys.executable).parent
PORTS = ("8090", "8091", "8092", "8093")
SETTLE_S = 60.0


@attrs.frozen
class Step:
    """One ``$`` line: the command as shown, what it printed, its exit status."""

    command: str
    output: tuple[str, ...]
    status: int


def operate_block() -> str:
    """The text of the README's Operate ``console`` block."""
    (block,) = [b for b in readme_blocks(README) if b.lang == "console" and "operate" in b.text]
    return block.text


def shown_session(block: str | None = None) -> list[tuple[str, list[str]]]:
    """The ``$`` lines (as written) of a README ``console`` block (the Operate one by
    default) with the output shown under each."""
    text = operate_block() if block is None else block
    session = console_commands(text)
    commands = [line[2:] for line in text.splitlines() if line.startswith("$ ")]
    return [(command, output) for command, (_, output) in zip(commands, session, strict=True)]


def prepare(where: Path, tiny: Path) -> dict[str, str]:
    """``operate.toml`` as written (free ports only: its llama-server and, as root, its
    ``run_as`` are the defaults ``inferactors run`` fills in) and ``models.json`` with
    ``tiny`` and ``broken`` registered, in ``where``; the README port -> the real one."""
    ports = dict(zip(PORTS, map(str, free_ports(len(PORTS))), strict=True))
    text = (ROOT / "examples" / "operate.toml").read_text()
    (where / "operate.toml").write_text(ported(text, ports))
    (where / "tiny.gguf").write_bytes(tiny.read_bytes())
    (where / "broken.gguf").write_text("this is not a GGUF model\n")
    for path in (where / "tiny.gguf", where / "broken.gguf"):
        path.chmod(0o644)
    for name in ("tiny", "broken"):
        add = ["inferactors", "models", "add", f"{name}.gguf", "--name", name]
        subprocess.run(
            [*add, "--registry", "models.json"],
            cwd=where,
            env=session_env(),
            check=True,
            timeout=60,
        )
    return ports


def run_session(
    where: Path,
    ports: dict[str, str],
    shown: list[tuple[str, list[str]]] | None = None,
    settle: Callable[[Path], None] | None = None,
) -> list[Step]:
    """Run the README's commands (``shown``: the Operate session's by default) in
    ``where`` (ports replaced), each once ``settle(where)`` returned (the Operate
    session's rule by default); the supervisor is stopped at the end whatever happened."""
    steps: list[Step] = []
    supervisor: subprocess.Popen[bytes] | None = None
    settled = settle or _settle
    try:
        for command, _ in shown or shown_session():
            real = ported(command, ports)
            if real.startswith("inferactors run "):
                supervisor = start_background(where, real)
            elif real == "kill %1":
                assert supervisor is not None
                supervisor.send_signal(signal.SIGTERM)
                steps.append(Step(command, (), supervisor.wait(timeout=60)))
                continue
            else:
                settled(where)
                done = subprocess.run(
                    ["bash", "-c", real],
                    cwd=where,
                    env=session_env(),
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                output = tuple((done.stdout + done.stderr).splitlines())
                steps.append(Step(command, output, done.returncode))
                continue
            steps.append(Step(command, (), 0))
    finally:
        if supervisor is not None and supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
    return steps


def render(steps: Sequence[Step]) -> str:
    """The session as a README ``console`` block's text."""
    lines = []
    for step in steps:
        lines.append(f"$ {step.command}")
        lines.extend(step.output)
    return "\n".join(lines) + "\n"


_VARIABLE = (
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.+]+"), "<time>"),
    (re.compile(r"\b(\d+h\d\dm|\d+m\d\ds|\d+s)\b"), "<uptime>"),  # 13s, 1m05s, 2h07m
    (re.compile(r"-[0-9a-f]{8}-"), "-<id>-"),
    (re.compile(r"/proc/self/fd/\d+"), "/proc/self/fd/<n>"),
    (re.compile(r"\d+(\.\d+)?(e[+-]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalized(lines: Sequence[str], ports: dict[str, str] | None = None) -> list[str]:
    """The lines with what differs between two runs replaced by placeholders."""
    out = []
    for line in lines:
        if ports is not None:
            line = _unported(line, ports)
        for pattern, placeholder in _VARIABLE:
            line = pattern.sub(placeholder, line)
        out.append(line.strip())
    return out


def ported(text: str, ports: dict[str, str]) -> str:
    """``text`` with each README port (a whole number, not part of one) made the real one,
    all at once (a real port that holds a README port is not replaced again)."""
    return _swapped(text, ports)


def _unported(text: str, ports: dict[str, str]) -> str:
    return _swapped(text, {real: shown for shown, real in ports.items()})


def _swapped(text: str, mapping: dict[str, str]) -> str:
    pattern = re.compile(r"(?<!\d)(" + "|".join(map(re.escape, mapping)) + r")(?!\d)")
    return pattern.sub(lambda match: mapping[match[1]], text)


def session_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{INFERACTORS_BIN}:{os.environ.get('PATH', '')}"}


def start_background(where: Path, command: str) -> subprocess.Popen[bytes]:
    words = command.split(">")[0].split()
    log = (where / "run.log").open("wb")
    with log:
        return subprocess.Popen(words, cwd=where, env=session_env(), stdout=log, stderr=log)


def _settle(where: Path) -> None:
    """Wait until the supervisor answers and no instance is starting or restarting."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["inferactors", "status", "operate.toml", "--json"],
            cwd=where,
            env=session_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode == 0 and all(_settled(v) for v in json.loads(done.stdout)):
            return
        time.sleep(0.2)
    log = (where / "run.log").read_text(errors="replace")[-3000:]
    raise AssertionError(f"the fleet did not settle in {SETTLE_S} s; the run's log ends:\n{log}")


def _settled(view: dict[str, object]) -> bool:
    status = view["status"]
    assert isinstance(status, dict)
    supervision = str(status.get("supervision") or "")
    return status["state"] in ("running", "exited") and not supervision.startswith("restarting")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (all held at once
    while chosen, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
