"""How much of a managed server's output is kept: `ServerLogs` (``[managed.logs]``).

A pure value with ``validate()``, like the rest of `_config`. The ring and the file it
describes are ``_edges/log_ring.py``.
"""

from __future__ import annotations

import attrs

from .._errors import InvalidConfig

MAX_RING_LINES = 1_000_000
"""The most lines a ring may be asked to keep (about 200 MB of typical server lines)."""
MIN_MEMORY_BYTES = 65536
"""The least memory a ring may be given: room for a few whole 8 KiB pieces of a line."""

FILE_BYTES = 10 << 20
"""The size at which an instance's log file is rotated by default (10 MiB)."""


@attrs.frozen
class ServerLogs:
    """The output kept of each managed server, per instance.

    Attributes:
        lines: how many of its last stdout and stderr lines are kept in memory, across its
            restarts (1 to `MAX_RING_LINES`; default 1000).
        memory_bytes: the most memory those lines may take, each counted with its
            bookkeeping (about 120 bytes a line); the oldest go first (at least
            `MIN_MEMORY_BYTES`; default 4 MiB).
        total_memory_bytes: the most memory the lines of every instance of the
            supervisor may take together; past it, the instance holding the most loses its
            oldest lines first (at least `MIN_MEMORY_BYTES`; default 64 MiB).
        file_bytes: the lines are also written to ``<data_root>/logs/<instance id>.log``
            (mode 0600, in a 0700 directory), rotated once it reaches this many bytes
            (default `FILE_BYTES`, 10 MiB; 0: no file). A supervisor started later reads
            the file's last lines back, so ``inferactors logs`` shows them.
        file_count: how many rotated files are kept beside it (``.log.1`` ...; default 3):
            on disk, an instance's output takes at most ``file_bytes * (file_count + 1)``
            bytes (40 MiB by default).
    """

    lines: int = 1000
    memory_bytes: int = 4 << 20
    total_memory_bytes: int = 64 << 20
    file_bytes: int = FILE_BYTES
    file_count: int = 3

    def validate(self, field: str = "managed.logs") -> None:
        """Raise `InvalidConfig` naming the field for a bad value."""
        if not 1 <= self.lines <= MAX_RING_LINES:
            raise InvalidConfig(f"{field}.lines must be 1..{MAX_RING_LINES}, got {self.lines}")
        for name in ("memory_bytes", "total_memory_bytes"):
            value = getattr(self, name)
            if value < MIN_MEMORY_BYTES:
                raise InvalidConfig(
                    f"{field}.{name} must be at least {MIN_MEMORY_BYTES} bytes, got {value}"
                )
        if self.file_bytes < 0:
            raise InvalidConfig(f"{field}.file_bytes must not be negative, got {self.file_bytes}")
        if self.file_count < 1:
            raise InvalidConfig(f"{field}.file_count must be at least 1, got {self.file_count}")
