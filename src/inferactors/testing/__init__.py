"""Helpers for testing with inferactors: tiny deterministic models that real servers load.

Needs the development extras for some helpers (``pip install 'inferactors[dev]'``); importing
this package does not.
"""

from ._tiny_models import write_tiny_gguf as write_tiny_gguf

__all__ = ["write_tiny_gguf"]
