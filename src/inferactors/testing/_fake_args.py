"""The fake server program's command line: its argparse parser (``_fake_faults`` reads it
into `FakeServerOptions`). Like the program, imports nothing of the ``inferactors`` package.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HEALTH_FAULTS = ("hang", "500", "reset", "busy")
"""The values of `FakeServerFaults.health_fault`."""

ROUTER_STATUSES = ("loaded", "loading", "unloaded", "failed")
"""The values of `FakeServerFaults.router_status`."""


LLAMA_SERVER_HELP = Path(__file__).with_name("llama_server_help.txt")
"""The real llama-server's ``--help`` (the pinned build's), shipped with the kit: the fake's
own ``--help`` ends with it, so admission's check of ``extra_args`` against the program's
flags lets through what the real server takes. The fake accepts those
flags and ignores the ones it does not act on (``parse_known_args``)."""


class _FirstAlias(argparse.Action):
    """llama-server keeps every ``--alias`` and lists the first as the model's id (checked
    with the pinned build): the launch's own comes first, a user's ``extra_args`` one after."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is None:
            setattr(namespace, self.dest, values)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inferactors.testing._fake_server",
        description="inferactors' fake llama-server / mlx_lm.server with injectable faults.",
        epilog="llama-server's own flags, accepted (and ignored unless listed above):\n\n"
        + LLAMA_SERVER_HELP.read_text(encoding="utf-8"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, required=True)
    add("--flavor", choices=("llamacpp", "mlx"), default="llamacpp")
    add("-m", "--model", default="tiny.gguf", help="the served model path (mlx: the only one)")
    add("--alias", action=_FirstAlias, help="llamacpp: the id /v1/models lists (the first)")
    for name in ("--request-log", "--pid-file", "--child-pid-file", "--flood-stats"):
        add(name, type=Path)
    add("--load-s", type=float, default=0.0, help="answer 'loading' for S seconds")
    add("--load-forever", action="store_true", help="load forever (FC-06, FC-07)")
    add("--dead-generator", action="store_true", help="mlx: generator dies when loaded")
    add("--crash-after-s", type=float, help="crash S seconds after listening")
    add("--exit-code", type=int, default=1, help="exit status of that crash")
    add("--crash-signal", help="crash by this signal instead (e.g. SIGABRT)")
    add("--crash-on-completion", metavar="SIGNAL", help="die on a completion (FC-08)")
    add("--crash-at-completion", type=int, default=1, metavar="K", help="... the K-th one")
    add("--completion-delay-s", type=float, default=0.0, help="answer completions late")
    add("--impostor", metavar="MODEL", help="claim to serve MODEL (FC-14)")
    add("--ignore-sigterm", action="store_true", help="ignore SIGTERM (FC-05, FC-11)")
    add("--hang-completions", action="store_true", help="never answer completions (FC-04)")
    add("--fail-completions-after", type=int, metavar="N", help="hang after N completions")
    add("--extra-port", type=int, help="also listen on this port (of --extra-host)")
    add("--extra-host", default="127.0.0.1")
    add("--extra-after-s", type=float, default=0.0, help="open the extra port S s after listening")
    add("--fork-child", action="store_true", help="fork a child that stays alive (FC-12)")
    add("--bind-delay-s", type=float, default=0.0, help="listen only after S seconds")
    add("--health-fault", choices=HEALTH_FAULTS, help="llamacpp: /health misbehaves")
    add("--health-fault-after-s", type=float, default=0.0, help="... from S seconds on")
    add("--router-status", choices=ROUTER_STATUSES, help="llamacpp: router-mode model status")
    add("--require-api-key", action="store_true", help="llamacpp: 401 to all but /health")
    add("--outlive-parent", action="store_true", help="keep serving when the parent dies")
    add("--stream-tokens", type=int, default=1, metavar="N", help="a stream says N tokens")
    add("--stream-token-delay-s", type=float, default=0.0, help="... S seconds apart")
    add("--stream-die-after", type=int, metavar="K", help="die after K tokens of a stream")
    add("--stream-forever", action="store_true", help="a stream never ends")
    add("--models-status", type=int, metavar="CODE", help="GET /v1/models answers CODE")
    add("--flood-start-bytes", type=int, default=0, help="write N bytes of lines at start-up")
    add("--flood-line-bytes", type=int, default=120, help="... in lines of N bytes")
    add("--flood-bytes-per-s", type=float, default=0.0, help="then N bytes a second for ever")
    add("--fail-status", type=int, metavar="CODE", help="answer completions with CODE ...")
    add("--fail-from", type=int, default=1, metavar="N", help="... from the N-th")
    add("--fail-to", type=int, metavar="M", help="... to the M-th (default: all later)")
    add("--reset-at", type=int, metavar="K", help="reset the connection of completion K")
    add("--cut-at", type=int, default=1, metavar="K", help="the completion cut below")
    add("--cut-body-after", type=int, metavar="N", help="send N bytes of its body, close")
    add("--cut-stream-after", type=int, metavar="N", help="send N bytes of its stream, close")
    return parser
