"""Serve programs for tests: small ``sh`` wrappers that run a Python entry point with a
chosen interpreter and ``sys.path``.

As root, inferactors runs a managed server as an unprivileged ``run_as`` user, who may not
be able to execute the interpreter inferactors itself runs on (a pyenv build under
``/root``, say). These wrappers let such a user run a Python server (mlx_lm.server, the
fake server) with an interpreter it can execute and this environment's packages.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path


def write_python_program(
    path: Path, *, entry: str, python: str, sys_path: Sequence[str] = (), name: str = ""
) -> Path:
    """Write an executable (mode 0755) ``sh`` script that runs ``entry`` with ``python``.

    Args:
        path: where the script goes.
        entry: ``"module:function"``, for example ``"mlx_lm.server:main"``; the function is
            called with no arguments and sees the script's arguments in ``sys.argv[1:]``.
        python: the interpreter (run in isolated mode, ``-I``).
        sys_path: directories put first on ``sys.path`` (site-packages, sources).
        name: ``sys.argv[0]`` for the program (default: the module name).

    Returns:
        ``path``.
    """
    module, function = entry.split(":")
    code = (
        "import sys\n"
        f"sys.path[:0] = {list(sys_path)!r}\n"
        f"sys.argv[0] = {name or module!r}\n"
        f"from {module} import {function}\n"
        f"sys.exit({function}())\n"
    )
    argv = [python, "-I", "-c", code]
    path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + ' "$@"\n')
    path.chmod(0o755)
    return path
