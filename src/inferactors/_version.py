"""The installed package's version, as its metadata says (``pyproject.toml``'s)."""

from __future__ import annotations


def package_version() -> str:
    """``inferactors``'s version (``0.1.0``), or ``unknown`` when it is not installed as a
    distribution (sources on ``sys.path`` only)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("inferactors")
    except PackageNotFoundError:
        return "unknown"
