"""Helpers for testing with inferactors, and for testing applications that use local model
servers: fake llama-server, mlx_lm.server and Ollama processes that play faults written as
data (`Timeline`, the field cases by name with `field_case`), tiny deterministic models that
real servers load, a managed runtime kit, a fake fleet for MockClock tests, a recording
proxy. The pytest plugin (`inferactors.testing.pytest_plugin`) offers them as fixtures.

The fakes, the plugin and the runtime kit come with ``pip install -e '.[testing]'``;
`write_tiny_gguf`, `write_tiny_mlx` and their fixtures also need ``[testing-models]``
(gguf, numpy, safetensors, tokenizers); see docs/testing.md.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from .._actors.front_door_resident import ResidentScheduler as ResidentScheduler
    from ._fake_faults import FakeServerFaults as FakeServerFaults
    from ._fake_fleet import FakeChild as FakeChild
    from ._fake_fleet import FakeFleet as FakeFleet
    from ._fake_launch import fake_server_argv as fake_server_argv
    from ._fake_launch import write_fake_server_program as write_fake_server_program
    from ._fake_ollama import open_fake_ollama as open_fake_ollama
    from ._fake_ollama_api import FakeOllama as FakeOllama
    from ._fake_ollama_api import FakeOllamaConfig as FakeOllamaConfig
    from ._fake_open import open_fake_server as open_fake_server
    from ._fake_processes import FakeOllamaServer as FakeOllamaServer
    from ._fake_processes import FakeServer as FakeServer
    from ._fake_processes import FakeStartError as FakeStartError
    from ._fake_processes import start_fake_ollama as start_fake_ollama
    from ._fake_processes import start_fake_server as start_fake_server
    from ._fake_residency import FakeMemory as FakeMemory
    from ._fake_residency import FakeStream as FakeStream
    from ._field_cases import FIELD_CASES as FIELD_CASES
    from ._field_cases import NOT_REPRODUCIBLE as NOT_REPRODUCIBLE
    from ._field_cases import FieldCase as FieldCase
    from ._field_cases import field_case as field_case
    from ._field_cases import field_case_info as field_case_info
    from ._programs import write_python_program as write_python_program
    from ._recording_proxy import RecordedRequest as RecordedRequest
    from ._recording_proxy import RecordingProxy as RecordingProxy
    from ._recording_proxy import open_recording_proxy as open_recording_proxy
    from ._runtime_kit import RuntimeKit as RuntimeKit
    from ._timeline import BindBeyondLoopback as BindBeyondLoopback
    from ._timeline import CrashAt as CrashAt
    from ._timeline import DeadGenerator as DeadGenerator
    from ._timeline import EndlessStream as EndlessStream
    from ._timeline import ForeignKeepAlive as ForeignKeepAlive
    from ._timeline import ForeignModelLoaded as ForeignModelLoaded
    from ._timeline import ForkedChild as ForkedChild
    from ._timeline import Hang as Hang
    from ._timeline import HealthLies as HealthLies
    from ._timeline import IgnoreSigterm as IgnoreSigterm
    from ._timeline import ImpostorOnPort as ImpostorOnPort
    from ._timeline import ListenLate as ListenLate
    from ._timeline import LoadTimeout as LoadTimeout
    from ._timeline import SlowFirstToken as SlowFirstToken
    from ._timeline import SlowLoad as SlowLoad
    from ._timeline import Status503 as Status503
    from ._timeline import StreamDies as StreamDies
    from ._timeline import Timeline as Timeline
    from ._timeline import UnloadLingers as UnloadLingers
    from ._timeline_data import timeline_from_data as timeline_from_data
    from ._timeline_data import timeline_from_json as timeline_from_json
    from ._timeline_data import timeline_from_toml as timeline_from_toml
    from ._timeline_data import timeline_to_data as timeline_to_data
    from ._tiny_mlx import write_tiny_mlx as write_tiny_mlx
    from ._tiny_models import write_tiny_gguf as write_tiny_gguf
    from ._workspace import Workspace as Workspace

_LAZY: dict[str, str] = {
    "BindBeyondLoopback": "._timeline",
    "CrashAt": "._timeline",
    "DeadGenerator": "._timeline",
    "EndlessStream": "._timeline",
    "FIELD_CASES": "._field_cases",
    "FakeChild": "._fake_fleet",
    "FakeFleet": "._fake_fleet",
    "FakeMemory": "._fake_residency",
    "FakeOllama": "._fake_ollama_api",
    "FakeOllamaConfig": "._fake_ollama_api",
    "FakeOllamaServer": "._fake_processes",
    "FakeServer": "._fake_processes",
    "FakeServerFaults": "._fake_faults",
    "FakeStartError": "._fake_processes",
    "FakeStream": "._fake_residency",
    "FieldCase": "._field_cases",
    "ForeignKeepAlive": "._timeline",
    "ForeignModelLoaded": "._timeline",
    "ForkedChild": "._timeline",
    "Hang": "._timeline",
    "HealthLies": "._timeline",
    "IgnoreSigterm": "._timeline",
    "ImpostorOnPort": "._timeline",
    "ListenLate": "._timeline",
    "LoadTimeout": "._timeline",
    "NOT_REPRODUCIBLE": "._field_cases",
    "RecordedRequest": "._recording_proxy",
    "RecordingProxy": "._recording_proxy",
    "ResidentScheduler": ".._actors.front_door_resident",
    "RuntimeKit": "._runtime_kit",
    "SlowFirstToken": "._timeline",
    "SlowLoad": "._timeline",
    "Status503": "._timeline",
    "StreamDies": "._timeline",
    "Timeline": "._timeline",
    "UnloadLingers": "._timeline",
    "Workspace": "._workspace",
    "fake_server_argv": "._fake_launch",
    "field_case": "._field_cases",
    "field_case_info": "._field_cases",
    "open_fake_ollama": "._fake_ollama",
    "open_fake_server": "._fake_open",
    "open_recording_proxy": "._recording_proxy",
    "start_fake_ollama": "._fake_processes",
    "start_fake_server": "._fake_processes",
    "timeline_from_data": "._timeline_data",
    "timeline_from_json": "._timeline_data",
    "timeline_from_toml": "._timeline_data",
    "timeline_to_data": "._timeline_data",
    "write_fake_server_program": "._fake_launch",
    "write_python_program": "._programs",
    "write_tiny_gguf": "._tiny_models",
    "write_tiny_mlx": "._tiny_mlx",
}
"""Where each public name lives, imported on its first use (PEP 562 ``__getattr__``), so
loading the pytest plugin or one helper does not load every fake and the runtime kit.
``tests/test_public_api.py`` holds it, the type checker's imports above and `__all__`
to the same names."""

__all__ = [  # noqa: RUF022  (plain sorted(), as tests/test_public_api.py checks)
    "BindBeyondLoopback",
    "CrashAt",
    "DeadGenerator",
    "EndlessStream",
    "FIELD_CASES",
    "FakeChild",
    "FakeFleet",
    "FakeMemory",
    "FakeOllama",
    "FakeOllamaConfig",
    "FakeOllamaServer",
    "FakeServer",
    "FakeServerFaults",
    "FakeStartError",
    "FakeStream",
    "FieldCase",
    "ForeignKeepAlive",
    "ForeignModelLoaded",
    "ForkedChild",
    "Hang",
    "HealthLies",
    "IgnoreSigterm",
    "ImpostorOnPort",
    "ListenLate",
    "LoadTimeout",
    "NOT_REPRODUCIBLE",
    "RecordedRequest",
    "RecordingProxy",
    "ResidentScheduler",
    "RuntimeKit",
    "SlowFirstToken",
    "SlowLoad",
    "Status503",
    "StreamDies",
    "Timeline",
    "UnloadLingers",
    "Workspace",
    "fake_server_argv",
    "field_case",
    "field_case_info",
    "open_fake_ollama",
    "open_fake_server",
    "open_recording_proxy",
    "start_fake_ollama",
    "start_fake_server",
    "timeline_from_data",
    "timeline_from_json",
    "timeline_from_toml",
    "timeline_to_data",
    "write_fake_server_program",
    "write_python_program",
    "write_tiny_gguf",
    "write_tiny_mlx",
]


if not typing.TYPE_CHECKING:  # the type checker reads the imports above instead

    def __getattr__(name: str) -> object:
        """The public ``name``, imported from its module on first use (then kept here)."""
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
