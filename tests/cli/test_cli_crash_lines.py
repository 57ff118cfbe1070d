"""The CLI's event printer gives a crashed instance one line naming the exception, and the
exit of the server it stopped the reason ``error`` (issue 8, item 1)."""

from __future__ import annotations

from inferactors import InstanceCrashed, ProcessExited, StopReason
from inferactors._cli.output import describe_event, evidence_block
from inferactors._edges.capture import RunEvidence


def test_an_instance_crash_is_one_line_naming_the_exception_and_where() -> None:
    crash = InstanceCrashed(
        "chat-1", "RecursionError", "maximum recursion depth exceeded", "worker monitor", 1.0
    )
    assert describe_event(crash) == (
        "chat-1  CRASHED in worker monitor: RecursionError: maximum recursion depth exceeded"
    )
    bare = InstanceCrashed("chat-1", "KeyError", "", "its loop, handling Probed", 1.0)
    assert describe_event(bare) == "chat-1  CRASHED in its loop, handling Probed: KeyError"


def test_the_exit_of_a_server_stopped_for_a_crash_says_error() -> None:
    exited = ProcessExited("chat-1", 4242, None, 15, StopReason.ERROR, 2.0)
    assert describe_event(exited) == "chat-1  process 4242 killed by SIGTERM (reason: error)"


def test_the_demos_evidence_block_shows_the_servers_lines_without_escapes() -> None:
    """Escapes (a title, a colour) in a server's last lines never reach the terminal."""
    evidence = RunEvidence(
        args=("llama-server",),
        pid=7,
        exit_code=0,
        signal=None,
        elapsed_s=1.0,
        stdout=b"",
        stderr=b"",
        stdout_bytes=0,
        stderr_bytes=40,
        truncated=False,
        stdout_tail="",
        stderr_tail="\x1b]0;pwned\x07\x1b[31mbye\x1b[0m\n",
    )
    assert evidence_block(evidence).splitlines()[-1] == "    | bye"
