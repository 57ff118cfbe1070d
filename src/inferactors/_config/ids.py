"""Instance ids (pure; no I/O).

An instance id is ``"{role}-{8 hex}-{node_id}"``, where the hex digits are the first eight
of BLAKE3 over role, runtime id, model (or nothing), base URL and mode, concatenated with no
separators.
"""

from __future__ import annotations

import blake3

from .._errors import InvalidConfig, shown
from .config import ControlMode
from .spec import InferenceSpec, valid_token


def check_node_id(node_id: str) -> str:
    """Return ``node_id`` if it is a plain token of 1 to 64 characters.

    Raises:
        InvalidConfig: it is not.
    """
    if not valid_token(node_id, 64):
        raise InvalidConfig(f"node id must be a plain token (1-64 chars), got {shown(node_id)}")
    return node_id


def instance_id(spec: InferenceSpec, mode: ControlMode, node_id: str) -> str:
    """The instance id of ``spec`` run in ``mode`` on ``node_id``."""
    check_node_id(node_id)
    material = "".join((spec.role, spec.runtime.id, spec.model or "", spec.base_url(), mode.value))
    digest = blake3.blake3(material.encode()).hexdigest()[:8]
    return f"{spec.role}-{digest}-{node_id}"
