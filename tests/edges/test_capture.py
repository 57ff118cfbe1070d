"""Tests of output capture and run evidence, the pure parts of the process edge: how an exit
status or signal is described, how `OutputCapture` keeps a head and a tail of a stream
whatever its chunking, and what `RunEvidence` says and audits without leaking output.
"""

from __future__ import annotations

import itertools
import json
import signal

import attrs
import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferactors._edges.capture import OutputCapture, RunEvidence, describe_exit, signal_name

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


@given(st.integers(min_value=0, max_value=255))
def test_describe_exit_keeps_exit_status(code: int) -> None:
    assert describe_exit(code) == (code, None)


@given(st.integers(min_value=1, max_value=64))
def test_describe_exit_turns_negative_returncode_into_signal(signum: int) -> None:
    assert describe_exit(-signum) == (None, signum)


def test_signal_name_falls_back_to_the_number() -> None:
    assert signal_name(15) == "SIGTERM"
    assert signal_name(999) == "signal 999"


@settings(max_examples=80)
@given(
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=6),
    head_limit=st.integers(min_value=0, max_value=120),
    tail_limit=st.integers(min_value=1, max_value=40),
)
def test_capture_is_independent_of_chunking(
    data: bytes, cuts: list[int], head_limit: int, tail_limit: int
) -> None:
    capture = OutputCapture(head_limit=head_limit, tail_limit=tail_limit)
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    for start, end in itertools.pairwise(bounds):
        capture.feed(data[start:end])
    assert capture.head == data[:head_limit]
    assert capture.total == len(data)
    assert capture.truncated == (len(data) > head_limit)
    assert capture.tail_text == expected_tail_text(data, tail_limit)


def expected_tail_text(data: bytes, tail_limit: int) -> str:
    """The last ``tail_limit`` bytes, minus at most 3 leading continuation bytes when cut."""
    tail = data[-tail_limit:]
    if len(data) > tail_limit:
        for _ in range(3):
            if tail[:1] and tail[0] & 0xC0 == 0x80:
                tail = tail[1:]
    return tail.decode("utf-8", errors="replace")


def test_capture_tail_drops_a_character_cut_in_half() -> None:
    capture = OutputCapture(head_limit=4, tail_limit=4)
    capture.feed("abcdé€".encode())  # é is 2 bytes, € is 3: the tail starts inside é
    assert capture.tail_text == "€"
    whole = OutputCapture(tail_limit=5)
    whole.feed("é€".encode())
    assert whole.tail_text == "é€"


def make_evidence(
    *, exit_code: int | None = 0, signum: int | None = None, killed_after_grace: bool = False
) -> RunEvidence:
    out = OutputCapture()
    out.feed(b"secret model output")
    out.mark_eof()
    err = OutputCapture()
    err.mark_eof()
    evidence = RunEvidence.from_run(
        args=("--port", "8090"), pid=42, returncode=0, elapsed_s=1.5, stdout=out, stderr=err
    )
    return attrs.evolve(
        evidence, exit_code=exit_code, signal=signum, killed_after_grace=killed_after_grace
    )


def test_evidence_describes_exit_and_signal() -> None:
    assert make_evidence().describe() == "exited with status 0"
    signalled = make_evidence(exit_code=None, signum=signal.SIGTERM)
    assert signalled.describe() == "killed by SIGTERM"
    late = make_evidence(exit_code=None, signum=signal.SIGKILL, killed_after_grace=True)
    assert late.describe() == "killed by SIGKILL after the grace period"
    assert RunEvidence.empty().describe() == "exit status unknown"


def test_evidence_audit_summarises_without_output() -> None:
    evidence = make_evidence().owned_by("infer.llamacpp", "chat-0123abcd-node1")
    audit = evidence.audit()
    assert audit["stdout_blake3"] == blake3.blake3(b"secret model output").hexdigest()
    assert audit["stdout_bytes"] == len(b"secret model output")
    assert audit["runtime"] == "infer.llamacpp"
    assert audit["instance_id"] == "chat-0123abcd-node1"
    assert audit["args"] == ["--port", "8090"]
    assert audit["exit_code"] == 0
    assert audit["output_eof"] is True
    assert "secret" not in json.dumps(audit)


def test_empty_evidence_carries_its_owner() -> None:
    evidence = RunEvidence.empty(runtime="infer.ollama", instance_id="chat-1")
    assert (evidence.runtime, evidence.instance_id, evidence.pid) == ("infer.ollama", "chat-1", 0)
    assert evidence.exit_code is None
    assert evidence.signal is None


def test_evidence_repr_is_a_summary_and_the_bytes_stay_available() -> None:
    """A printed stop's evidence once dumped every byte kept (5.8 KB for the demo's stop,
    up to 2 MiB): now a line, the sizes and each tail's last line."""
    out, err = OutputCapture(), OutputCapture()
    out.feed(b"x" * (3 << 20))
    err.feed(b"loading...\n" * 500 + b"srv operator(): cleaning up before exit...\n")
    for stream in (out, err):
        stream.mark_eof()
    evidence = RunEvidence.from_run(
        args=("--port", "8090"), pid=42, returncode=0, elapsed_s=1.5, stdout=out, stderr=err
    )
    shown = repr(evidence)
    assert len(shown) < 700, shown
    assert "pid=42" in shown
    assert "exit_code=0" in shown
    assert "stdout=<1048576 bytes kept>" in shown
    assert "stdout_bytes=3145728" in shown
    assert "stderr_tail=...'srv operator(): cleaning up before exit...'" in shown
    assert "loading" not in shown
    assert str(evidence) == (
        "pid 42 exited with status 0 after 1.50 s; wrote 3145728 + 5543 bytes "
        "(stdout + stderr); last: 'srv operator(): cleaning up before exit...'"
    )
    assert len(evidence.stdout) == 1 << 20  # the attributes keep what was kept
    assert evidence.stderr.endswith(b"cleaning up before exit...\n")
    assert evidence.stderr_tail.endswith("cleaning up before exit...\n")


def test_an_evidence_tail_repr_cuts_a_long_last_line() -> None:
    evidence = attrs.evolve(RunEvidence.empty(), stderr_tail="y" * 5000)
    shown = repr(evidence)
    assert "stderr_tail=...'" + "y" * 120 + "'" in shown
    assert "y" * 121 not in shown
    assert "stdout_tail=''" in shown
