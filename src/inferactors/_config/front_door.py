"""The run file's ``[front_door]`` table: one HTTP address for every model of the run.

::

    [front_door]
    port = 8800                # on 127.0.0.1; 0 takes any free port (it is logged)
    # host = "::1"             # any loopback address
    # api_key_file = "front-door.key"
    # max_body_bytes = 33554432
    # bodies_at_once = 64
    # body_timeout_s = 60.0
    # body_idle_timeout_s = 10.0
    # connect_timeout_s = 5.0
    # read_timeout_s = 600.0

The exposure rule holds for the front door as for the servers it fronts: it listens on a
loopback address unless the file says ``allow_beyond_loopback = true`` AND names an
``api_key_file`` (then every request must carry ``Authorization: Bearer <key>``; on
loopback the key is optional, and enforced when given). Pure values; durations are float
seconds; a relative ``api_key_file`` was resolved against the run file's directory by the
loader.
"""

from __future__ import annotations

import ipaddress
import math
from pathlib import Path

import attrs

from .._errors import InvalidConfig, shown
from .binding import is_loopback_name

MiB = 1024 * 1024
MAX_BODY_BYTES = 32 * MiB
"""The default cap of a client's request body (images travel base64 inside JSON)."""


@attrs.frozen
class FrontDoorConfig:
    """The ``[front_door]`` table (module docstring).

    Attributes:
        port: the TCP port (0: any free one).
        host: the address it listens on; loopback unless ``allow_beyond_loopback``.
        allow_beyond_loopback: accept a ``host`` that is not loopback (needs
            ``api_key_file``).
        api_key_file: a file holding the key clients must send as a bearer token (one line,
            mode 0600, owned by the supervisor's user).
        max_body_bytes: the largest request body read, bytes.
        bodies_at_once: how many large request bodies (over 256 KiB) are read and parsed
            at once (one more: 503); the bodies being read, large or small, hold at most
            8 * ``max_body_bytes`` bytes together (each only what has arrived of it).
        body_timeout_s: how long a request body may take to arrive, float seconds.
        body_idle_timeout_s: the longest a request body may send nothing (before its first
            byte, or between two reads) before it is refused with 408, float seconds.
        connect_timeout_s: how long connecting to a server may take, float seconds.
        read_timeout_s: how long a server may stay silent (before its first byte, or
            between two chunks of a stream), float seconds.
    """

    port: int
    host: str = "127.0.0.1"
    allow_beyond_loopback: bool = False
    api_key_file: Path | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    bodies_at_once: int = 64
    body_timeout_s: float = 60.0
    body_idle_timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0

    def validate(self, field: str = "$.front_door") -> None:
        """Check every setting, naming the field.

        Raises:
            InvalidConfig: a port outside 0-65535, a host that is not an IP address, a
                host beyond loopback without ``allow_beyond_loopback`` or without an
                ``api_key_file``, a size or duration that is not positive.
        """
        if not 0 <= self.port <= 65535:
            raise InvalidConfig(f"{field}.port must be 0 to 65535, got {self.port}")
        self._check_host(field)
        if self.max_body_bytes <= 0:
            raise InvalidConfig(f"{field}.max_body_bytes must be positive")
        if self.bodies_at_once <= 0:
            raise InvalidConfig(f"{field}.bodies_at_once must be positive")
        for name in (
            "body_timeout_s",
            "body_idle_timeout_s",
            "connect_timeout_s",
            "read_timeout_s",
        ):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise InvalidConfig(f"{field}.{name} must be a positive number of seconds")

    def loopback(self) -> bool:
        """Whether ``host`` is a loopback address (``localhost`` counts: `is_loopback_name`)."""
        return is_loopback_name(self.host)

    def listen_host(self) -> str:
        """The address to bind: ``host``, with ``localhost`` read as 127.0.0.1."""
        return "127.0.0.1" if self.host == "localhost" else self.host

    def _check_host(self, field: str) -> None:
        if self.host != "localhost":
            try:
                ipaddress.ip_address(self.host)
            except ValueError:
                raise InvalidConfig(
                    f"{field}.host {shown(self.host)} is not an IP address"
                ) from None
        if self.loopback():
            return
        if not self.allow_beyond_loopback:
            raise InvalidConfig(
                f"{field}.host {self.host} is not loopback: the front door listens on "
                "loopback unless allow_beyond_loopback = true (with an api_key_file)"
            )
        if self.api_key_file is None:
            raise InvalidConfig(
                f"{field}.api_key_file is required to listen beyond loopback ({self.host}): "
                "every client must then send the key"
            )
