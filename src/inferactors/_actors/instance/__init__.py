"""The instance actor of a llama.cpp or mlx-lm server (managed or adopted): one package, as
httpx keeps ``_transports/``. ``actor`` is the loop; see design/actors.md."""

from .actor import CRASH_GRACE_S as CRASH_GRACE_S
from .actor import InstanceActor as InstanceActor
