"""The README's front door session is what a real ``inferactors run`` does.

Every ``$`` line of the README's front door block runs as shown, in a fresh directory with
``examples/on_demand.toml``, the real llama-server and two tiny models: the real ``openai``
and ``ollama`` clients (the README's ``clients.py``) use both models through the one
address, streaming included; each command exits 0 and prints what the README shows once
times, pids, ports, ids and numbers are taken out; at the end ``status`` shows one model
resident and the other exited with reason ``evicted``, which its process's exit (the
events) and the metrics (parsed with prometheus-client's parser) say too; SIGTERM ends the
supervisor with 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.on_demand_session_support import prepare, settle, shown
from e2e.operate_session_support import Step, normalized, run_session
from support import Unprivileged

pytestmark = pytest.mark.llama_server


def test_the_front_door_session_runs_as_the_readme_shows(
    server_dir: Path, llama_server: Path, unprivileged: Unprivileged
) -> None:
    ports = prepare(server_dir)
    session = shown()
    steps = run_session(server_dir, ports, session, settle)
    assert [step.command for step in steps] == [command for command, _ in session]
    for step, (_, output) in zip(steps, session, strict=True):
        assert step.status == 0, step
        assert normalized(step.output, ports) == normalized(output), step
    _assert_the_clients_used_both_models(_one(steps, "python clients.py"))
    _assert_one_resident_and_one_evicted(_statuses(steps)[-1])
    _assert_the_exits_say_evicted(_one(steps, "inferactors events"))
    _assert_metrics_say_evicted(_one(steps, "curl "))


def _one(steps: list[Step], start: str) -> Step:
    (step,) = [s for s in steps if s.command.startswith(start)]
    return step


def _statuses(steps: list[Step]) -> list[dict[str, list[str]]]:
    tables = [s for s in steps if s.command.startswith("inferactors status")]
    return [{row.split()[0]: row.split() for row in table.output[1:]} for table in tables]


def _assert_the_clients_used_both_models(step: Step) -> None:
    said = [line.split(": ", 1) for line in step.output if line.startswith(("chat:", "writer:"))]
    assert [who for who, _ in said] == ["chat", "writer", "writer", "chat"]
    assert all(text.strip() for _, text in said), step.output  # the real models spoke
    assert step.output[0] == "[('chat', 'not-loaded'), ('writer', 'not-loaded')]"


def _assert_one_resident_and_one_evicted(rows: dict[str, list[str]]) -> None:
    assert rows["chat"][2] == "running"
    assert rows["chat"][8] == "resident"  # after ENDPOINT, MODEL, PID, UPTIME, RESTARTS
    assert rows["writer"][2] == "idle"  # evicted: the scheduler stopped it, requests start it
    assert rows["writer"][8] == "not-loaded"
    assert " ".join(rows["writer"]).endswith("; reason: evicted")


def _assert_the_exits_say_evicted(step: Step) -> None:
    exits = [line.split()[1] for line in step.output if "exited" in line]  # after the time
    assert exits == ["chat", "writer"]  # each process's own exit: reason evicted
    assert all(line.endswith("(reason: evicted)") for line in step.output)


def _assert_metrics_say_evicted(scrape: Step) -> None:
    samples = [
        sample
        for family in text_string_to_metric_families("\n".join(scrape.output))
        for sample in family.samples
    ]
    for name in ("inferactors_process_exits_total", "inferactors_residency_stops_total"):
        counted = {
            (s.labels["instance"], s.labels["reason"]): s.value for s in samples if s.name == name
        }
        assert counted == {("chat", "evicted"): 1.0, ("writer", "evicted"): 1.0}, name
