"""Helpers for testing with inferactors: tiny deterministic models that real servers load,
fake servers with injectable faults, a fake fleet for MockClock tests, a recording proxy.

Some helpers need the development extras (``pip install 'inferactors[dev]'``); importing
this package does not.
"""

from ._fake_fleet import FakeChild as FakeChild
from ._fake_fleet import FakeFleet as FakeFleet
from ._recording_proxy import RecordedRequest as RecordedRequest
from ._recording_proxy import RecordingProxy as RecordingProxy
from ._recording_proxy import open_recording_proxy as open_recording_proxy
from ._tiny_models import write_tiny_gguf as write_tiny_gguf

__all__ = [
    "FakeChild",
    "FakeFleet",
    "RecordedRequest",
    "RecordingProxy",
    "open_recording_proxy",
    "write_tiny_gguf",
]
