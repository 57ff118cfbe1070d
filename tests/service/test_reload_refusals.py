"""A reload checks before it changes, and says what was refused (issue 10 item 3, found by
an operator): fake llama-servers (real processes) behind a real `Fleet`.

- an instance to load that fails its dry admission (an unknown model, a missing API key
  file) refuses the whole reload, naming the instance and the field; nothing changes;
- one refused only at its start (its new port held by another process) is listed in
  `ReloadResult.refused`, and the RELOADED note is marked failed;
- a failed reload, TOML syntax included, is RELOADING=1 then READY=1 with a STATUS
  naming the failure;
- the metrics of a removed instance go with it.
"""

from __future__ import annotations

import socket

import pytest
import trio

from inferactors import InvalidConfig
from inferactors._service.fleet_open import open_fleet
from inferactors._service.lifecycle import ServiceNotes
from inferactors._service.views import Lifecycle, LifecycleNote
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, Recorder, RunFile, pids, running, until


async def test_a_reload_whose_instance_fails_admission_changes_nothing(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    one, two = Entry("one", free_port()), Entry("two", free_port())
    run.write(one, two)
    notes: list[LifecycleNote] = []
    async with open_fleet(run.config(), run.path) as fleet:
        fleet.on_lifecycle(notes.append)
        await until(fleet, running("one", "two"))
        before = pids(fleet)
        key = f', api_key_file = "{inferactors_kit.root / "no-such-key"}"'
        added = Entry("three", free_port(), serve=key)
        run.write(Entry("one", one.port, model="tinyy"), two, added)
        with pytest.raises(InvalidConfig) as raised:
            await fleet.reload()
        message = str(raised.value)
        assert "instance one: model tinyy: no registered model 'tinyy'" in message
        assert "instance three: serve.api_key_file" in message
        await trio.sleep(0.3)
        assert pids(fleet) == before
        assert [view.name for view in fleet.views()] == ["one", "two"]
        assert [note.kind for note in notes[-2:]] == [Lifecycle.RELOADING, Lifecycle.RELOADED]
        assert notes[-1].failed
        assert "instance one: model tinyy" in notes[-1].detail


async def test_an_instance_refused_at_its_start_is_listed_as_refused(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    one, two = Entry("one", free_port()), Entry("two", free_port())
    run.write(one, two)
    notes: list[LifecycleNote] = []
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        async with open_fleet(run.config(), run.path) as fleet:
            fleet.on_lifecycle(notes.append)
            await until(fleet, running("one", "two"))
            run.write(one, Entry("two", held, extra="required = false\n"))
            result = await fleet.reload()
            assert result.changed == ("two",)
            [(name, why)] = result.refused
            assert name == "two"
            assert f"something already holds port {held}" in why
            assert notes[-1].failed
            assert notes[-1].detail.endswith(f"refused two: {why}")
            assert not fleet.given_up.is_set()  # "two" is optional: "one" is supervised
            run.write(one, Entry("two", held))  # required now: down for good, for config
            await fleet.reload()
            assert fleet.given_up.is_set()
            assert fleet.exit_status == 78


async def test_a_failed_reload_is_reloading_then_ready_with_the_failure(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("one", free_port()))
    recorder = Recorder()
    async with open_fleet(run.config(), run.path) as fleet:
        fleet.on_lifecycle(ServiceNotes(recorder, fleet).on_note)
        await until(fleet, running("one"))
        run.path.write_text("[[instances]\n")
        with pytest.raises(InvalidConfig, match="TOML syntax error"):
            await fleet.reload()
        run.write(Entry("one", free_port(), model="tinyy"))
        with pytest.raises(InvalidConfig, match="model tinyy"):
            await fleet.reload()
    sent = [fields for _, fields in recorder.sent if "STOPPING" not in fields]
    assert [sorted(fields) for fields in sent] == [
        ["MONOTONIC_USEC", "RELOADING", "STATUS"],
        ["READY", "STATUS"],
    ] * 2
    assert "1 of 1 running; reload refused: " in str(sent[1]["STATUS"])
    assert "TOML syntax error" in str(sent[1]["STATUS"])
    assert "instance one: model tinyy" in str(sent[3]["STATUS"])


async def test_a_removed_instance_leaves_no_series(inferactors_kit: RuntimeKit) -> None:
    run = RunFile.create(inferactors_kit)
    keep, drop = Entry("keep", free_port()), Entry("drop", free_port())
    run.write(keep, drop)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("keep", "drop"))
        await until(fleet, lambda f: len(_families_of(f.metrics_text(), "drop")) >= 3)
        families = _families_of(fleet.metrics_text(), "drop")
        assert {
            "inferactors_time_to_ready_seconds",
            "inferactors_probe_duration_seconds_count",
        } <= families
        run.write(keep)
        result = await fleet.reload()
        assert result.removed == ("drop",)
        await trio.sleep(0.5)  # the stopped server's late events are ignored
        text = fleet.metrics_text().decode()
        assert 'instance="keep"' in text
        assert 'instance="drop"' not in text


def _families_of(text: bytes, name: str) -> set[str]:
    """The sample names with a series of instance ``name``."""
    lines = text.decode().splitlines()
    return {line.split("{")[0] for line in lines if f'instance="{name}"' in line}
