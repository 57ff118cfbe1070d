"""``python -m inferactors``: the same as the ``inferactors`` command."""

import sys

from ._cli import main

sys.exit(main())
