"""Faults as data (issue 12, item 2): every step reads back from TOML and JSON through the one
converter, bad input names its field, a step a fake cannot play is refused, and every field
case is either ready by name or explained."""

from __future__ import annotations

import json

import pytest

from inferactors import InvalidConfig
from inferactors.testing import (
    BindBeyondLoopback,
    CrashAt,
    DeadGenerator,
    EndlessStream,
    FakeServerFaults,
    ForeignKeepAlive,
    ForeignModelLoaded,
    ForkedChild,
    Hang,
    HealthLies,
    IgnoreSigterm,
    ImpostorOnPort,
    ListenLate,
    LoadTimeout,
    SlowFirstToken,
    SlowLoad,
    Status503,
    StreamDies,
    Timeline,
    UnloadLingers,
    field_case,
    field_case_info,
    timeline_from_data,
    timeline_from_json,
    timeline_from_toml,
    timeline_to_data,
)
from inferactors.testing._fake_faults import Flavor
from inferactors.testing._field_cases import FIELD_CASES, NOT_REPRODUCIBLE
from inferactors.testing._timeline_data import FAULT_NAMES

SERVER = Timeline.of(
    Status503(for_s=2.5),
    Hang(after_requests=4),
    CrashAt(request=3, signal="SIGABRT"),
    SlowFirstToken(delay_s=0.25),
    IgnoreSigterm(),
    BindBeyondLoopback(host="127.0.0.2", port=4242),
    ImpostorOnPort(model="other.gguf"),
    ListenLate(after_s=1.0),
    ForkedChild(),
)
OLLAMA = Timeline.of(
    LoadTimeout(after_s=1.5, message="boom"),
    UnloadLingers(for_s=3.0),
    ForeignModelLoaded(model="big:7b"),
    ForeignKeepAlive(model="tiny", keep_alive=300, after_s=2.0),
)


def toml_of(data: dict[str, list[dict[str, object]]]) -> str:
    lines = []
    for step in data["steps"]:
        lines.append("[[steps]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in step.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("timeline", [SERVER, OLLAMA, Timeline.of(HealthLies(), DeadGenerator())])
def test_a_timeline_reads_back_from_data_toml_and_json(timeline: Timeline) -> None:
    data = timeline_to_data(timeline)
    assert timeline_from_data(data) == timeline
    assert timeline_from_json(json.dumps(data)) == timeline
    assert timeline_from_toml(toml_of(data)) == timeline


def test_every_step_has_a_name_in_data() -> None:
    others = (HealthLies(), DeadGenerator(), SlowLoad(for_s=1.0), StreamDies(), EndlessStream())
    named = {type(step) for step in (*SERVER.steps, *OLLAMA.steps, *others)}
    assert set(FAULT_NAMES.values()) == named
    assert FAULT_NAMES["status_503"] is Status503
    assert FAULT_NAMES["crash_at"] is CrashAt


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[steps]]\nfault = "crash_at"\nrequest = "3"',
            r"^\$\.steps\[0\]\.request: expected int, got string$",
        ),
        (
            '[[steps]]\nfault = "hang"\n[[steps]]\nfault = "status_503"\nfor_s = true',
            r"^\$\.steps\[1\]\.for_s: expected",
        ),
        ('[[steps]]\nfault = "hang"\nafter = 1', r"^\$\.steps\[0\]\.after: unknown key$"),
        ('[[steps]]\nfault = "hangs"', r"^\$\.steps\[0\]\.fault: expected one of .*got \"hangs\""),
        (
            '[[steps]]\nfault = "slow_first_token"',
            r"^\$\.steps\[0\]\.delay_s: required key missing$",
        ),
        (
            '[[steps]]\nfault = "hang"\nafter_requests = -1',
            r"^\$\.steps\[0\]\.after_requests: must be >= 0, got -1$",
        ),
        ('[[steps]]\nfault = "crash_at"', r"^\$\.steps\[0\]: .*exactly one of request and after_s"),
        ("steps = 3", r"^\$\.steps: expected an array"),
        ("faults = []", r"^\$\.faults: unknown key"),
        ("[[steps]\n", r"^timeline TOML: "),
    ],
)
def test_bad_input_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        timeline_from_toml(text)


def test_the_server_steps_become_the_fake_servers_flags() -> None:
    faults = SERVER.server_faults("llamacpp")
    assert faults == FakeServerFaults(
        load_s=2.5,
        fail_completions_after=4,
        crash_on_completion="SIGABRT",
        crash_at_completion=3,
        completion_delay_s=0.25,
        ignore_sigterm=True,
        extra_host="127.0.0.2",
        extra_port=4242,
        impostor="other.gguf",
        bind_delay_s=1.0,
        fork_child=True,
    )
    assert Timeline.of(CrashAt(request=1)).server_faults().crash_on_completion == "SIGKILL"
    after = Timeline.of(CrashAt(after_s=0.5, exit_code=3)).server_faults()
    assert (after.crash_after_s, after.exit_code, after.crash_on_completion) == (0.5, 3, None)
    assert Timeline.of(HealthLies()).server_faults("llamacpp").hang_completions
    assert Timeline.of(HealthLies()).server_faults("mlx").load_forever
    assert Timeline.of(Status503()).server_faults().load_forever
    assert Timeline.of(BindBeyondLoopback()).server_faults().extra_port is not None


def test_the_ollama_steps_become_the_fake_ollamas_config() -> None:
    config = OLLAMA.ollama_config(("tiny:latest", "big:7b"))
    assert (config.load_delay_s, config.load_error) == (1.5, "boom")
    assert (config.unload_linger_s, config.preloaded) == (3.0, ("big:7b",))
    assert OLLAMA.foreign_keep_alives() == (OLLAMA.steps[3],)


def play(timeline: Timeline, flavor: Flavor) -> FakeServerFaults:
    timeline.kind()
    return timeline.server_faults(flavor)


@pytest.mark.parametrize(
    ("timeline", "flavor", "message"),
    [
        (Timeline.of(Status503(for_s=1.0)), "mlx", r"Status503: mlx_lm\.server answers 200"),
        (Timeline.of(DeadGenerator()), "llamacpp", r"DeadGenerator is an mlx_lm\.server fault"),
        (Timeline.of(LoadTimeout()), "llamacpp", "LoadTimeout is an Ollama fault"),
        (Timeline.of(Hang(), LoadTimeout()), "llamacpp", "mixes server and Ollama steps"),
    ],
)
def test_a_step_the_fake_cannot_play_is_refused(
    timeline: Timeline, flavor: Flavor, message: str
) -> None:
    with pytest.raises(InvalidConfig, match=message):
        play(timeline, flavor)


def test_steps_that_set_different_flags_all_apply() -> None:
    faults = play(Timeline.of(Hang(), Status503(for_s=1.0), CrashAt(after_s=9.0)), "llamacpp")
    assert faults.hang_completions
    assert (faults.load_forever, faults.load_s, faults.crash_after_s) == (False, 1.0, 9.0)
    with pytest.raises(InvalidConfig, match=r"Hang is a llama-server/mlx_lm\.server fault"):
        Timeline.of(Hang()).ollama_config()


def test_every_field_case_is_ready_by_name_or_explained() -> None:
    ids = {f"FC-{n:02d}" for n in range(1, 23)}
    assert set(FIELD_CASES) | set(NOT_REPRODUCIBLE) == ids
    assert not set(FIELD_CASES) & set(NOT_REPRODUCIBLE)
    assert field_case("FC-07") == Timeline.of(DeadGenerator())
    assert field_case("fc7") == field_case("FC-07")
    assert field_case_info("FC-19").fake == "ollama"
    for case in FIELD_CASES.values():  # each plays on the fake it names
        if case.fake == "ollama":
            case.timeline.ollama_config()
        else:
            case.timeline.server_faults(case.fake)
    with pytest.raises(
        InvalidConfig,
        match="FC-16 is not reproducible with a fake: the fakes stream a single token",
    ):
        field_case("FC-16")
    with pytest.raises(InvalidConfig, match="unknown field case 'FC-99'"):
        field_case("FC-99")
