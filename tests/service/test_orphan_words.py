"""The line ``inferactors run`` says about a server an earlier life left behind: in words
(pid, process group, program, port, the record it was found by, what was done), never the
raw repr (issue 10, found by an operator)."""

from __future__ import annotations

from pathlib import Path

from inferactors._edges.orphan_report import OrphanOutcome, ReapedOrphan
from inferactors._service.fleet import orphan_words


def test_a_reaped_orphan_is_said_in_words() -> None:
    record = Path("/state/chat-1a2b3c4d-x/server.json")
    orphan = ReapedOrphan(
        record,
        4242,
        8090,
        OrphanOutcome.KILLED,
        "orphaned; group 4242 ended by SIGTERM",
        pgid=4242,
        program="/opt/llama/llama-server",
    )
    assert orphan_words(orphan) == (
        "found a server left by an earlier life: pid 4242 (process group 4242, "
        "/opt/llama/llama-server, port 8090), by its record "
        "/state/chat-1a2b3c4d-x/server.json: killed (orphaned; group 4242 ended by SIGTERM)"
    )


def test_an_unreadable_record_is_said_in_words() -> None:
    record = Path("/state/x/server.json")
    orphan = ReapedOrphan(record, None, None, OrphanOutcome.IGNORED, "not owned by us")
    words = orphan_words(orphan)
    assert words == (
        "found an unreadable record of an earlier life's server, /state/x/server.json: "
        "ignored (not owned by us)"
    )
    assert "ReapedOrphan(" not in words


def test_a_cgroup_left_without_a_record_is_said_as_found_by_its_cgroup() -> None:
    where = Path("/sys/fs/cgroup/x/inferactors/0123456789abcdef/77-100/chat-1-0a0b0c0d")
    detail = "the cgroup chat-1-0a0b0c0d of an earlier life, with no record, held 99; ended"
    orphan = ReapedOrphan(where, 99, None, OrphanOutcome.KILLED, detail, program="sleep")
    assert orphan_words(orphan) == (
        f"found a server left by an earlier life: pid 99 (sleep), by its cgroup {where}: "
        f"killed ({detail})"
    )
