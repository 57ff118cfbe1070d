"""The instance actor of a llama.cpp or mlx-lm server (managed or adopted), as one package
(as httpx keeps ``_transports/``): ``actor`` is the loop, ``step`` every decision (pure),
``verdicts`` how it judges what the watching tasks report, ``stopping`` how a rule stops
the process, ``state`` what it knows, ``status`` how that reads, ``effects`` what the loop
carries out, ``messages`` what its workers post back (and what the loop saw, ``Seen``),
and the workers ``process_life``, ``probing``, ``exposure`` and ``pins``. See
design/actors.md."""

from .actor import InstanceActor as InstanceActor
from .stopping import CRASH_GRACE_S as CRASH_GRACE_S
