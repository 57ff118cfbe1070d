"""``inferactors probe livez|readyz|readyz/NAME``: a container probe that asks a running
supervisor's control socket, for an exec probe (``contrib/kubernetes/deployment.yaml``).

A kubelet's httpGet probe connects to the pod's IP, never to its loopback, so it cannot
reach the control API (a Unix socket, or an optional loopback TCP port); an exec probe
runs this command instead. It sends one ``GET /livez``, ``/readyz`` or ``/readyz/NAME``
to the supervisor found from the run file or ``--state-dir`` and prints the answer.

exit status:
  0  the supervisor answered 200 (alive; ready)
  1  it answered anything else (503: not alive, not ready), or not within --timeout
     (busy or frozen)
  2  bad arguments or run file
  3  no supervisor is running (no control socket, or the connection is refused)
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from .._errors import one_line
from .control_args import IntermixedParser, add_target_arguments, add_timeout_argument, socket_of
from .control_client import (
    EXIT_ERROR,
    ControlClient,
    ControlError,
)

DEFAULT_TIMEOUT_S = 4.0
_ENDPOINT = re.compile(r"livez|readyz(/[^/\s]+)?")


def _endpoint(text: str) -> str:
    if not _ENDPOINT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected livez, readyz or readyz/NAME, got {text!r}")
    return text


PROBE_HELP = """Ask a running supervisor whether it is alive or ready, for a container's exec
probe (contrib/kubernetes/deployment.yaml).

A kubelet's httpGet probe connects to the pod's IP, never to its loopback, so it cannot
reach the control API; an exec probe runs this command instead. It sends one GET /livez,
/readyz or /readyz/NAME to the supervisor found from the run file or --state-dir and
prints the answer.

exit status:
  0  the supervisor answered 200 (alive; ready)
  1  it answered anything else (503: not alive, not ready), or not within --timeout
     (busy or frozen)
  2  bad arguments or run file
  3  no supervisor is running (no control socket, or the connection is refused)
"""


def add_probe_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors probe``."""
    parser = subparsers.add_parser(
        "probe",
        help="ask a running supervisor /livez or /readyz (for container exec probes)",
        description=PROBE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.__class__ = IntermixedParser  # subparsers are made of the main parser's class
    parser.add_argument(
        "endpoint", type=_endpoint, metavar="livez|readyz|readyz/NAME", help="which probe"
    )
    add_target_arguments(parser)
    add_timeout_argument(parser, DEFAULT_TIMEOUT_S)
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"status": CODE, "body": ...} (the reply\'s JSON) instead of the line',
    )
    parser.set_defaults(func=probe)


def probe(args: argparse.Namespace) -> int:
    """Entry point of ``inferactors probe``; returns the exit status."""
    try:
        client = ControlClient.open(socket_of(args), args.timeout)
        try:
            reply = client.answer("GET", f"/{args.endpoint}", limit_s=args.timeout)
            reply.close()  # its body was read
        finally:
            client.close()
    except ControlError as error:
        print(one_line(f"inferactors probe: /{args.endpoint}: {error}"), file=sys.stderr)
        return error.exit_status
    if args.json:
        print(json.dumps({"status": reply.status_code, "body": _body(reply.text)}))
    else:
        print(one_line(f"{reply.status_code} {reply.text.strip()}"))
    return 0 if reply.status_code == 200 else EXIT_ERROR


def _body(text: str) -> object:
    """The reply's JSON, or its text when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text
