"""The ``inferactors`` command: the only place that calls ``trio.run``.

May import everything. Nothing imports it but ``__main__``.
"""

from .main import main as main

__all__ = ["main"]
