"""Terminal escapes in a real server's output neither hide its reason nor reach the user
(issue 9, breaker's F5): a serve program that prints a window title (OSC) before
``error: invalid argument: --lies`` was a generic crash shown as ``| ]0;xerror: ...``.

The programs are the breaker's ``osc.sh`` and ``flood.sh``: shell scripts run as ``nobody``
that answer ``--help`` with the real llama-server's (the flag check reads it) and otherwise
print and exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.startup_support import Outcome, assert_config_error, run_until_gave_up
from inferactors import (
    InferConfig,
    InferenceSpec,
    InferFlavor,
    ManagedConfig,
    ServeArgs,
    open_runtime,
)
from support import Unprivileged

ERROR = "error: invalid argument: --lies"

OSC = r"printf '\033]0;x\007error: invalid argument: --lies\n' >&2"
FLOOD = (  # 20 MB on stdout without a newline, then every escape class before the reason
    r'head -c 20000000 /dev/zero | tr "\0" "x"; '
    r"printf '\033]0;pwned\007\033[2J\033[31m\033]8;;http://x\033\\\033P1\033\\"
    r"\033_apc\033\\\033(Berror: invalid argument: --lies\033[0m\n' >&2"
)


def program(where: Path, llama_server: Path, body: str) -> Path:
    path = where / "serve.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --help "*|*" -h "*|*" --version "*) exec {llama_server} "$@" ;; esac\n'
        f"{body}; exit 1\n"
    )
    path.chmod(0o755)
    return path


def config(
    server_dir: Path, registry: Path, serve: Path, unprivileged: Unprivileged
) -> InferConfig:
    managed = ManagedConfig(
        registry=registry,
        data_root=server_dir / "state",
        serve_program=serve,
        run_as=unprivileged.run_as,
    )
    return InferConfig.managing(InferFlavor.LLAMACPP, managed)


def assert_shown_clean(outcome: Outcome) -> None:
    for exited in outcome.exits:
        for line in exited.last_lines:
            assert "\x1b" not in line, line
            assert "]0;" not in line, line
            assert "[31m" not in line, line
        assert exited.last_lines[-1] == ERROR
    assert outcome.status.last_lines[-1] == ERROR


@pytest.mark.parametrize("body", [OSC, FLOOD], ids=["osc", "flood-20MB"])
async def test_an_escaped_error_line_is_a_diagnosed_invalid_flag_shown_clean(
    server_dir: Path,
    registry_path: Path,
    llama_server: Path,
    unprivileged: Unprivileged,
    free_port: int,
    body: str,
) -> None:
    serve = program(server_dir, llama_server, body)
    spec = InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=free_port)
    )
    async with open_runtime(
        config(server_dir, registry_path, serve, unprivileged), node_id="test"
    ) as runtime:
        outcome = await run_until_gave_up(runtime, spec)
    assert_config_error(outcome, "invalid flag", ERROR)
    assert_shown_clean(outcome)
