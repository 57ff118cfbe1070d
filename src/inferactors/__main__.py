"""``python -m inferactors``: the same as the ``inferactors`` command."""

import sys

from ._cli.main import main

sys.exit(main())
