"""A timeline is checked when it is read, not when a fake starts (issue 12 break, classes 3,
4 and 6): every bad value names its field (ranges too), unknown signals, addresses a fake
cannot bind, non-finite numbers, keep_alives Ollama refuses and contradicting steps are
refused at load; a foreign model must be pulled; the plugin's marker takes timeline data,
gives each fake of a test the steps it plays, and names the fixture a step needs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from inferactors import InvalidConfig
from inferactors.testing import (
    BindBeyondLoopback,
    CrashAt,
    DeadGenerator,
    ForeignKeepAlive,
    ForeignModelLoaded,
    Hang,
    LoadTimeout,
    Status503,
    Timeline,
    timeline_from_data,
    timeline_from_toml,
    timeline_to_data,
)
from inferactors.testing.pytest_plugin import timeline_for


def step_data(fault: str, **fields: object) -> dict[str, object]:
    return {"steps": [{"fault": fault, **fields}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (step_data("status_503", for_s=-1.0), r"^\$\.steps\[0\]\.for_s: must be >= 0, got -1\.0$"),
        (step_data("crash_at", request=0), r"^\$\.steps\[0\]\.request: must be >= 1, got 0$"),
        (step_data("hang", after_requests=-1), r"^\$\.steps\[0\]\.after_requests: must be >= 0"),
        (step_data("crash_at", request=1, signal="SIGFOO"), r"^\$\.steps\[0\]\.signal: .*SIGFOO"),
        (step_data("slow_first_token", delay_s=float("inf")), r"^\$\.steps\[0\]\.delay_s: .*inf"),
        (step_data("slow_load", for_s=float("nan")), r"^\$\.steps\[0\]\.for_s: .*finite.*nan"),
        (step_data("bind_beyond_loopback", port=70000), r"^\$\.steps\[0\]\.port: must be 1 to"),
        (
            step_data("bind_beyond_loopback", host="8.8.8.8"),
            r'^\$\.steps\[0\]\.host: must be "0\.0\.0\.0" or "::" .*loopback.*got "8\.8\.8\.8"',
        ),
        (step_data("bind_beyond_loopback", host="127.0.0.1"), r"^\$\.steps\[0\]\.host: "),
        (step_data("bind_beyond_loopback", host="localhost"), r"^\$\.steps\[0\]\.host: "),
        (
            step_data("foreign_keep_alive", keep_alive="forever-ish"),
            r'^\$\.steps\[0\]\.keep_alive: "forever-ish" is not a keep_alive Ollama accepts',
        ),
        (step_data("foreign_keep_alive", keep_alive="5x"), r"^\$\.steps\[0\]\.keep_alive: "),
        (
            {"steps": [{"fault": "status_503", "for_s": 1.0}, {"fault": "status_503"}]},
            r"^\$\.steps\[1\]: Status503 contradicts \$\.steps\[0\]",
        ),
        (
            {"steps": [{"fault": "hang"}, {"fault": "crash_at", "request": 1}] * 2},
            r"^\$\.steps\[2\]: Hang contradicts \$\.steps\[0\]",
        ),
        (
            {"steps": [{"fault": "load_timeout"}, {"fault": "slow_load", "for_s": 9.0}]},
            r"^\$\.steps\[1\]: SlowLoad contradicts \$\.steps\[0\] \(load_delay_s\)",
        ),
        (step_data("crash_at"), r"^\$\.steps\[0\]: CrashAt needs exactly one of request"),
    ],
)
def test_bad_data_is_refused_at_load_naming_the_field(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidConfig, match=message):
        timeline_from_data(data)


def test_what_the_checks_accept() -> None:
    accepted = Timeline.of(
        BindBeyondLoopback(host="::"),
        CrashAt(request=2, signal="SIGABRT"),
        CrashAt(after_s=9.0),  # one on a request, one after a time: no contradiction
        ForeignKeepAlive(keep_alive="300", after_s=1.0),
        ForeignKeepAlive(keep_alive=-1, after_s=2.0),  # foreign clients may come again
        ForeignKeepAlive(keep_alive="1h30m", after_s=3.0),
        ForeignModelLoaded(model="tiny"),
        ForeignModelLoaded(model="big:7b"),
    )
    assert timeline_from_data(json.loads(json.dumps(timeline_to_data(accepted)))) == accepted
    for host in ("0.0.0.0", "127.0.0.2", "::1"):
        BindBeyondLoopback(host=host)
    toml = '[[steps]]\nfault = "status_503"\nfor_s = 5\n'  # an int for a float
    assert timeline_from_toml(toml) == Timeline.of(Status503(for_s=5.0))


def test_steps_built_in_python_fail_at_once_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^for_s: must be >= 0, got -1$"):
        Status503(for_s=-1)
    with pytest.raises(ValueError, match=r"^signal: unknown signal \"SIGFOO\""):
        CrashAt(request=1, signal="SIGFOO")
    with pytest.raises(InvalidConfig, match=r"^\$\.steps\[1\]: Status503 contradicts"):
        Timeline.of(Status503(), Status503(for_s=1.0))


def test_a_foreign_model_must_be_pulled() -> None:
    with pytest.raises(InvalidConfig, match=r"ForeignModelLoaded: model 'ghost:latest' is not"):
        Timeline.of(ForeignModelLoaded(model="ghost:latest")).ollama_config(("tiny:latest",))
    with pytest.raises(InvalidConfig, match=r"ForeignKeepAlive: model 'ghost' is not pulled"):
        Timeline.of(ForeignKeepAlive(model="ghost")).ollama_config(("tiny:latest",))
    config = Timeline.of(ForeignModelLoaded(model="tiny")).ollama_config(("tiny:latest",))
    assert config.preloaded == ("tiny",)


def request_for(*fixtures: str, marker: tuple[object, ...]) -> pytest.FixtureRequest:
    """A stand-in for pytest's request: a test using ``fixtures``, marked with ``marker``."""
    mark = pytest.mark.inferactors_faults(*marker).mark
    node = SimpleNamespace(get_closest_marker=lambda name: mark)
    return SimpleNamespace(node=node, fixturenames=["request", *fixtures])  # type: ignore[return-value]


def test_a_mixed_marker_gives_each_fake_the_steps_it_plays() -> None:
    request = request_for(
        "fake_llama_server", "fake_ollama", marker=(LoadTimeout(), Status503(for_s=1.0), Hang())
    )
    assert timeline_for(request, "ollama") == Timeline.of(LoadTimeout())
    assert timeline_for(request, "llamacpp") == Timeline.of(Status503(for_s=1.0), Hang())
    assert timeline_for(request, "mlx") == Timeline.of(Hang())


def test_the_marker_takes_timeline_data() -> None:
    data = {"steps": [{"fault": "crash_at", "request": 3}]}
    request = request_for("fake_llama_server", marker=(data,))
    assert timeline_for(request, "llamacpp") == Timeline.of(CrashAt(request=3))
    bad = request_for("fake_llama_server", marker=(step_data("hang", after_requests="two"),))
    with pytest.raises(InvalidConfig, match=r"^\$\.steps\[0\]\.after_requests: expected int"):
        timeline_for(bad, "llamacpp")


@pytest.mark.parametrize(
    ("fixtures", "marker", "message"),
    [
        (("fake_llama_server",), ("FC-07",), r"DeadGenerator\(\) is played by fake_mlx_server"),
        (("fake_ollama",), (Status503(),), r"played by fake_llama_server, which this test"),
        (("fake_mlx_server",), (LoadTimeout(),), r"request fake_ollama instead"),
    ],
)
def test_a_step_no_fixture_of_the_test_plays_names_the_fixture_that_would(
    fixtures: tuple[str, ...], marker: tuple[object, ...], message: str
) -> None:
    request = request_for(*fixtures, marker=marker)
    with pytest.raises(InvalidConfig, match=message):
        timeline_for(request, "llamacpp")


def test_a_step_only_mlx_plays_is_fine_when_the_test_also_uses_the_mlx_fake() -> None:
    request = request_for("fake_llama_server", "fake_mlx_server", marker=("FC-07",))
    assert timeline_for(request, "llamacpp") == Timeline()
    assert timeline_for(request, "mlx") == Timeline.of(DeadGenerator())
