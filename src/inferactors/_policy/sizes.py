"""Byte counts in words, for people (pure; imports nothing, so the CLI's client commands
can show them without loading the rest of the package)."""

from __future__ import annotations

GB = 1_000_000_000
"""A decimal gigabyte, as the ledger's texts count."""


def size_text(value: int) -> str:
    """``55.0 GB``, ``600.0 MB``, ``12.3 kB`` or ``512 bytes``: decimal units, in the
    largest unit the figure reaches."""
    for unit, name in ((GB, "GB"), (1_000_000, "MB"), (1_000, "kB")):
        if abs(value) >= unit:
            return f"{value / unit:.1f} {name}"
    return f"{value} bytes"


def binary_size_text(size: int) -> str:
    """Bytes in binary units with one decimal: ``"512 B"``, ``"510.1 KiB"``, ``"4.2 GiB"``."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
