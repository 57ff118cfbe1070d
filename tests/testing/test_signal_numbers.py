"""A fault's signal may be given as its name, its number or a `signal.Signals` member: all
three mean the same crash, and an unknown number is refused naming the field."""

from __future__ import annotations

import signal

import pytest

from inferactors.testing import CrashAt, FakeServerFaults


@pytest.mark.parametrize("given", ["SIGTERM", 15, signal.SIGTERM])
def test_a_crash_step_takes_a_signal_by_name_number_or_member(given: object) -> None:
    assert CrashAt(request=1, signal=given).signal == "SIGTERM"


@pytest.mark.parametrize("given", ["SIGKILL", 9, signal.SIGKILL])
def test_the_faults_take_a_signal_by_name_number_or_member(given: object) -> None:
    faults = FakeServerFaults(crash_signal=given, crash_on_completion=given)
    assert (faults.crash_signal, faults.crash_on_completion) == ("SIGKILL", "SIGKILL")


def test_an_unknown_signal_number_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="signal"):
        CrashAt(request=1, signal=999)
