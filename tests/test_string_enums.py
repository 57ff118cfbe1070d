"""The public enums are string enums: ``str(state)`` and an f-string give the value a person
reads (``"running"``, not ``"InstanceState.RUNNING"``), a member equals its value, and the
JSON the converter writes and reads is what it was before they were (plain values)."""

from __future__ import annotations

import enum
import json

import pytest

import inferactors
from inferactors import (
    ControlMode,
    InstanceState,
    InstanceStatus,
    InvalidConfig,
    ProcessExited,
    StopReason,
)
from inferactors._config.convert_api import api_data, event_data
from inferactors._config.convert_hooks import converter

PUBLIC_ENUMS = sorted(
    (
        value
        for name in inferactors.__all__
        if isinstance(value := getattr(inferactors, name), type) and issubclass(value, enum.Enum)
    ),
    key=lambda cls: cls.__name__,
)


def test_there_are_public_enums_to_check() -> None:
    names = {cls.__name__ for cls in PUBLIC_ENUMS}
    assert {"InstanceState", "StopReason", "ControlMode", "InferFlavor"} <= names


@pytest.mark.parametrize("cls", PUBLIC_ENUMS, ids=lambda cls: cls.__name__)
def test_every_public_enum_is_a_string_enum(cls: type[enum.Enum]) -> None:
    assert issubclass(cls, enum.StrEnum)
    for member in cls:
        assert str(member) == member.value
        assert f"{member}" == member.value
        assert member == member.value
        assert cls(member.value) is member


def test_a_status_is_written_as_before_and_read_back() -> None:
    status = InstanceStatus(InstanceState.RUNNING, "server up", stop_reason="requested")
    data = api_data(status)
    assert type(data["state"]) is str
    assert data["state"] == "running"
    assert json.loads(json.dumps(data))["state"] == "running"
    assert converter.structure(data, InstanceStatus) == status


def test_an_event_is_written_with_plain_values() -> None:
    exited = ProcessExited(
        instance_id="chat-1",
        pid=7,
        exit_code=None,
        signal=9,
        reason=StopReason.READINESS_TIMEOUT,
        at=2.0,
    )
    data = event_data(exited)
    assert type(data["reason"]) is str
    assert json.dumps(data["reason"]) == '"readiness timeout"'


def test_an_unknown_value_is_still_refused_naming_the_choices() -> None:
    with pytest.raises(Exception, match='expected one of "managed", "adopted"'):
        converter.structure("both", ControlMode)
    with pytest.raises(InvalidConfig, match=r"runtime.*infer\.nope"):
        inferactors.spec_from_json('{"role": "chat", "runtime": "infer.nope"}')
