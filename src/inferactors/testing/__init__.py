"""Helpers for testing with inferactors: tiny deterministic models that real servers load,
fake servers with injectable faults, a fake fleet for MockClock tests, a recording proxy.

Some helpers need the development extras (``pip install 'inferactors[dev]'``); importing
this package does not.
"""

from ._fake_faults import FakeServerFaults as FakeServerFaults
from ._fake_fleet import FakeChild as FakeChild
from ._fake_fleet import FakeFleet as FakeFleet
from ._fake_launch import fake_server_argv as fake_server_argv
from ._fake_launch import write_fake_server_program as write_fake_server_program
from ._programs import write_python_program as write_python_program
from ._recording_proxy import RecordedRequest as RecordedRequest
from ._recording_proxy import RecordingProxy as RecordingProxy
from ._recording_proxy import open_recording_proxy as open_recording_proxy
from ._tiny_mlx import write_tiny_mlx as write_tiny_mlx
from ._tiny_models import write_tiny_gguf as write_tiny_gguf

__all__ = [
    "FakeChild",
    "FakeFleet",
    "FakeServerFaults",
    "RecordedRequest",
    "RecordingProxy",
    "fake_server_argv",
    "open_recording_proxy",
    "write_fake_server_program",
    "write_python_program",
    "write_tiny_gguf",
    "write_tiny_mlx",
]
