"""Tests of the fake inference server's options and answers, without running it: its argv
parses back to the same options, invalid options and arguments are refused, and which
fate each completion meets and what it answers while loading are decided purely.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from inferactors.testing._fake_answers import Die, Hang, Reply, completion_fate, decide
from inferactors.testing._fake_faults import (
    FakeServerFaults,
    FakeServerOptions,
    Flavor,
    parse_fake_server_args,
)
from inferactors.testing._fake_server import fake_server_argv
from testing.fake_server_support import CHAT, LOADING_BODY

durations = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
names = st.text("abcxyz0123456789._/", min_size=1, max_size=12)
signals = st.sampled_from(sorted(signal.Signals.__members__)) | st.none()
ports = st.integers(min_value=1, max_value=65535)

fault_values = st.builds(
    FakeServerFaults,
    load_s=durations,
    load_forever=st.booleans(),
    dead_generator=st.booleans(),
    crash_after_s=durations | st.none(),
    exit_code=st.integers(min_value=0, max_value=255),
    crash_signal=signals,
    crash_on_completion=signals,
    ignore_sigterm=st.booleans(),
    hang_completions=st.booleans(),
    fail_completions_after=st.integers(min_value=0, max_value=99) | st.none(),
    extra_port=ports | st.none(),
    extra_host=st.sampled_from(["127.0.0.1", "127.0.0.2", "::1", "0.0.0.0"]),
    fork_child=st.booleans(),
    bind_delay_s=durations,
)


@given(
    faults=fault_values,
    port=ports,
    flavor=st.sampled_from(["llamacpp", "mlx"]),
    model=names,
    alias=names | st.none(),
    files=st.lists(names.map(Path) | st.none(), min_size=3, max_size=3),
)
def test_argv_parses_back_to_the_same_options(
    faults: FakeServerFaults,
    port: int,
    flavor: Flavor,
    model: str,
    alias: str | None,
    files: list[Path | None],
) -> None:
    assume(flavor == "mlx" or not faults.dead_generator)
    request_log, pid_file, child_pid_file = files
    argv = fake_server_argv(
        port,
        flavor=flavor,
        model=model,
        faults=faults,
        python="py",
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
    )
    assert argv[:3] == ["py", "-I", "-c"]
    expected = FakeServerOptions(
        port=port,
        flavor=flavor,
        model=model,
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        faults=faults,
    )
    assert parse_fake_server_args(argv[4:]) == expected


def test_default_faults_add_no_flags() -> None:
    assert FakeServerFaults().args() == ()
    assert FakeServerFaults(load_s=0.5, ignore_sigterm=True).args() == (
        "--load-s",
        "0.5",
        "--ignore-sigterm",
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FakeServerFaults(load_s=-1.0), "load_s must be >= 0"),
        (lambda: FakeServerFaults(bind_delay_s=math.nan), "bind_delay_s must be >= 0"),
        (lambda: FakeServerFaults(crash_signal="SIGNOPE"), "unknown signal 'SIGNOPE'"),
        (lambda: FakeServerFaults(crash_on_completion="KILL"), "unknown signal 'KILL'"),
        (lambda: FakeServerFaults(extra_port=70000), "extra_port must be a TCP port"),
        (lambda: FakeServerFaults(exit_code=256), "exit_code"),
        (lambda: FakeServerFaults(fail_completions_after=-1), "fail_completions_after"),
        (lambda: fake_server_argv(0), "port must be a TCP port"),
        (
            lambda: fake_server_argv(8080, faults=FakeServerFaults(dead_generator=True)),
            "dead_generator is an mlx_lm.server fault",
        ),
    ],
)
def test_invalid_options_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_fake_server_args(["--port", "8080", "--crash-signal", "SIGNOPE"])
    assert exited.value.code == 2
    assert "unknown signal 'SIGNOPE'" in capsys.readouterr().err


def test_completion_faults_decide_each_completion() -> None:
    options = FakeServerOptions(port=8080, faults=FakeServerFaults(fail_completions_after=2))
    fates = [completion_fate(options, CHAT, number) for number in (1, 2, 3, 4)]
    assert [type(fate) for fate in fates] == [Reply, Reply, Hang, Hang]
    dying = attrs.evolve(options, faults=FakeServerFaults(crash_on_completion="SIGKILL"))
    assert completion_fate(dying, CHAT, 1) == Die("SIGKILL")


def test_llamacpp_answers_503_to_all_but_the_model_list_while_loading() -> None:
    options = FakeServerOptions(port=8080)
    for method, path in [("GET", "/health"), ("GET", "/props"), ("POST", CHAT), ("GET", "/")]:
        assert decide(options, "loading", method, path, b"") == Reply(503, LOADING_BODY)
    models = decide(options, "loading", "GET", "/v1/models?x=1", b"")
    assert isinstance(models, Reply)
    assert models.status == 200
