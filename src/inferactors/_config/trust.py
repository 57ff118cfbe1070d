"""Trust anchors as configured: ``[[managed.trust_anchors]]`` in the run file, or
``ManagedConfig.trust_anchors`` in the library.

Each entry names one PEM file: an elliptic-curve public key (``public_key``) or X.509 root
certificates (``certificate``) that a model's OpenSSF Model Signing signature must lead to.
Pure values; the registry reads and checks the files themselves (``_models/anchors.py``),
once, when a runtime opens it. A spec's ``signed_by`` names entries by ``name``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from .._errors import InvalidConfig, shown
from .spec import valid_token


@attrs.frozen
class TrustAnchorEntry:
    """One trust anchor: ``name`` (a plain token, 1 to 64 characters) and exactly one of
    ``public_key`` (a PEM EC P-256/P-384/P-521 public key) or ``certificate`` (PEM root
    certificates). Relative paths in a run file start from its directory."""

    name: str
    """A plain token (1 to 64 characters) that ``signed_by`` names."""
    public_key: Path | None = None
    """A PEM EC P-256/P-384/P-521 public key (this or ``certificate``)."""
    certificate: Path | None = None
    """PEM root certificates (this or ``public_key``)."""

    @property
    def kind(self) -> str:
        """``"public_key"`` or ``"certificate"``: the key that names the file."""
        return "public_key" if self.public_key is not None else "certificate"

    @property
    def path(self) -> Path:
        """The PEM file."""
        path = self.public_key if self.public_key is not None else self.certificate
        assert path is not None, "validated: one of public_key and certificate"
        return path

    def validate(self, field: str) -> None:
        """Raise `InvalidConfig` naming ``field.name`` or the file keys."""
        if not valid_token(self.name, 64):
            raise InvalidConfig(
                f"{field}.name must be a plain token (1-64 chars), got {shown(self.name)}"
            )
        if (self.public_key is None) == (self.certificate is None):
            raise InvalidConfig(f"{field}: name exactly one of public_key and certificate")


def check_trust_anchors(field: str, entries: Sequence[TrustAnchorEntry]) -> None:
    """Raise `InvalidConfig` (``field[i]...``) for a bad entry or a name used twice."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        entry.validate(f"{field}[{index}]")
        if entry.name in seen:
            raise InvalidConfig(
                f"{field}[{index}].name: {shown(entry.name)} names two trust anchors"
            )
        seen.add(entry.name)


def check_signed_by(
    field: str, signed_by: Sequence[str], entries: Sequence[TrustAnchorEntry]
) -> None:
    """Raise `InvalidConfig` (``field[i]``) for a name no entry has."""
    names = [entry.name for entry in entries]
    for index, name in enumerate(signed_by):
        if name not in names:
            configured = ", ".join(names) or "none"
            raise InvalidConfig(
                f"{field}[{index}]: no trust anchor named {shown(name)} in "
                f"$.managed.trust_anchors (configured: {configured})"
            )
