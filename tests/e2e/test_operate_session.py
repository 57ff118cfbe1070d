"""The README's Operate session is what a real ``inferactors run`` does (issue 10 item 10).

Every ``$`` line of the README's Operate block runs as shown, in a fresh directory with
``examples/operate.toml``, the real llama-server and the tiny model: each command exits as
shown (0; 1 for the 503 probe) and prints what the README shows once times, pids, ports,
ids and numbers are taken out; across the reload the unchanged servers keep their pids; the
metrics lines parse with prometheus-client's parser; SIGTERM ends the supervisor with 0.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from e2e.operate_session_support import Step, normalized, prepare, run_session, shown_session
from support import Unprivileged


# Not exclusive: it times nothing, and each command runs once the fleet has settled. The
# mid-session exit once seen on a loaded suite (the chat server SIGKILLed the moment its
# sibling failed to start) was a server spawned a moment earlier taken for an orphan,
# fixed in the spawn (tests/edges/test_spawning_leader.py).
def test_the_operate_session_runs_as_the_readme_shows(
    server_dir: Path, llama_server: Path, tiny_gguf: Path, unprivileged: Unprivileged
) -> None:
    ports = prepare(server_dir, tiny_gguf)
    steps = run_session(server_dir, ports)
    shown = shown_session()
    assert [step.command for step in steps] == [command for command, _ in shown]
    for step, (_, output) in zip(steps, shown, strict=True):
        expected_status = 1 if output and output[0].startswith("503 ") else 0
        assert step.status == expected_status, step
        assert normalized(step.output, ports) == normalized(output), _evidence(step, server_dir)
    _assert_reload_kept_pids(steps)
    _assert_metrics_parse(steps)


def _evidence(step: Step, where: Path) -> str:
    """The step, then the supervisor's log and each server's last lines: what a failed
    comparison needs to be understood (a server that exited says why there)."""
    parts = [repr(step), "--- run.log", _tail(where / "run.log", 60)]
    for log in sorted((where / "state" / "logs").glob("*.log")):
        parts += [f"--- {log.name}", _tail(log, 25)]
    return "\n".join(parts)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({error})"


def _pids(step: Step) -> dict[str, str]:
    rows = [line.split() for line in step.output[1:]]
    return {row[0]: row[5] for row in rows}  # NAME MODE STATE ENDPOINT MODEL PID


def _assert_reload_kept_pids(steps: list[Step]) -> None:
    before, after = (_pids(s) for s in steps if s.command.startswith("inferactors status"))
    assert before["chat"] == after["chat"] != "-"
    assert before["code"] == after["code"] != "-"
    assert before["broken"] == "-"
    assert after["broken"] != "-"


def _assert_metrics_parse(steps: list[Step]) -> None:
    (scrape,) = [s for s in steps if s.command.startswith("curl ")]
    samples = [
        sample
        for family in text_string_to_metric_families("\n".join(scrape.output))
        for sample in family.samples
    ]
    restarts = [s for s in samples if s.name == "inferactors_restarts_total"]
    assert [(s.labels["instance"], s.value) for s in restarts] == [("broken", 1.0)]
    exits = {
        (s.labels["instance"], s.labels["reason"]): s.value
        for s in samples
        if s.name == "inferactors_process_exits_total"
    }
    assert exits == {("broken", "start-up failure"): 2.0, ("code", "requested"): 1.0}
