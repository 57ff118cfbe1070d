"""Tests of containment: run_as resolution, the root refusal, reachability, the user switch.

These run as root (the machine runs its tests as root); the tests that need root say so.
The child programs run as ``nobody`` from a world-readable directory made under /tmp,
because pytest's tmp_path lies under a 0700 directory that nobody cannot search.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import psutil
import pytest
import trio

from inferactors._edges.containment import (
    READ,
    SEARCH,
    WRITE,
    access_problem,
    check_reachable,
    prepare_instance_dir,
    resolve_run_as,
)
from inferactors._edges.process import ManagedProcess
from inferactors._edges.spawn import IdentitySwitch, clamp_limit, plan_switch
from inferactors._errors import AdmissionRefused, BackendError, InvalidConfig
from inferactors._policy.privilege import RunAs, require_unprivileged

NOBODY_UID = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
needs_nobody = pytest.mark.skipif(
    not any(entry.pw_name == "nobody" for entry in pwd.getpwall()), reason="no user nobody"
)


@attrs.frozen
class Launch:
    """A stand-in for ``_launch.Launch``."""

    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


@pytest.fixture
def nobody() -> RunAs:
    if os.geteuid() != 0:
        pytest.skip("needs root to switch users")
    try:
        return resolve_run_as("nobody")
    except InvalidConfig:
        pytest.skip("no user nobody here")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A fresh 0755 directory under /tmp, owned by root."""
    path = Path(tempfile.mkdtemp(prefix="inferactors-test-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def no_leaked_children() -> Iterator[None]:
    yield
    leaked = psutil.Process().children(recursive=True)
    for child in leaked:
        child.kill()
    assert leaked == [], f"leaked child processes: {leaked}"


def make_file(path: Path, mode: int, text: str = "x", owner: tuple[int, int] = (0, 0)) -> Path:
    path.write_text(text)
    os.chown(path, *owner)
    path.chmod(mode)
    return path


def make_dir(path: Path, mode: int, owner: tuple[int, int] = (0, 0)) -> Path:
    path.mkdir()
    os.chown(path, *owner)
    path.chmod(mode)
    return path


# --- resolving run_as and refusing root ---------------------------------------------------------


@needs_nobody
def test_resolve_run_as_by_name_and_by_uid() -> None:
    entry = pwd.getpwnam("nobody")
    groups = tuple(sorted(set(os.getgrouplist("nobody", entry.pw_gid))))
    expected = RunAs(entry.pw_uid, entry.pw_gid, "nobody", groups)
    assert resolve_run_as("nobody") == expected
    assert resolve_run_as(str(entry.pw_uid)) == expected
    assert expected.gid in expected.group_ids


@needs_nobody
def test_resolve_run_as_uid_gid_is_taken_as_given() -> None:
    assert resolve_run_as(f"{NOBODY_UID}:100") == RunAs(NOBODY_UID, 100, "nobody", ())
    assert resolve_run_as("4000000:4000001") == RunAs(4000000, 4000001, "4000000", ())


@pytest.mark.parametrize("spec", ["root", "0", "0:0", "0:100"])
def test_resolve_run_as_refuses_uid_0(spec: str) -> None:
    with pytest.raises(InvalidConfig, match=r"^run_as must name a non-root user$"):
        resolve_run_as(spec)


def test_resolve_run_as_refuses_gid_0_and_unknowns() -> None:
    with pytest.raises(InvalidConfig, match=r"non-root user and group \(gid 0"):
        resolve_run_as("1000:0")
    with pytest.raises(InvalidConfig, match="no-such-user-xyz': no such user"):
        resolve_run_as("no-such-user-xyz")
    with pytest.raises(InvalidConfig, match="no user has uid 4000000; give uid:gid"):
        resolve_run_as("4000000")
    with pytest.raises(InvalidConfig, match="out of range"):
        resolve_run_as("4294967295:1")


def test_require_unprivileged_refuses_root_without_run_as() -> None:
    message = (
        "managed servers run unprivileged: set run_as to a non-root user "
        "when inferactors runs as root"
    )
    with pytest.raises(AdmissionRefused) as refused:
        require_unprivileged(None, 0)
    assert str(refused.value) == message
    require_unprivileged(RunAs(NOBODY_UID, NOBODY_UID, "nobody"), 0)
    require_unprivileged(None, 1000)


def test_plan_switch_is_made_only_by_root_and_only_when_needed() -> None:
    run_as = RunAs(1000, 1001, "alice", (1001, 27))
    assert plan_switch(None, 0, 0) is None
    assert plan_switch(run_as, 1000, 1001) is None  # we already are alice
    assert plan_switch(run_as, 0, 0) == IdentitySwitch((1001, 27), 1001, 1000)
    with pytest.raises(PermissionError, match="only root can run a server as user alice"):
        plan_switch(run_as, 2000, 2000)


# --- reachability: the message, and the kernel's own verdict -----------------------------------


@as_root
def test_check_reachable_names_the_directory_that_blocks_a_model_file(
    nobody: RunAs, open_dir: Path
) -> None:
    private = make_dir(open_dir / "private", 0o700)
    model = make_file(private / "x.gguf", 0o644)
    instance = make_dir(open_dir / "instance", 0o700, owner=(nobody.uid, nobody.gid))
    with pytest.raises(AdmissionRefused) as refused:
        check_reachable(nobody, directory=instance, files=[model], program=SYSTEM_PYTHON)
    assert str(refused.value) == (
        f"the model file {model} is not reachable by user nobody: "
        f"{private} is not searchable (mode 0700, owner root)"
    )


@as_root
def test_check_reachable_reports_every_problem(nobody: RunAs, open_dir: Path) -> None:
    instance = make_dir(open_dir / "instance", 0o755)
    program = make_file(open_dir / "llama-server", 0o744)
    unreadable = make_file(open_dir / "a.gguf", 0o640)
    missing = open_dir / "b.gguf"
    with pytest.raises(AdmissionRefused) as refused:
        check_reachable(nobody, directory=instance, files=[unreadable, missing], program=program)
    assert str(refused.value).split("; ") == [
        f"the instance directory {instance} is not reachable by user nobody: "
        f"{instance} is not writable (mode 0755, owner root)",
        f"the server program {program} is not reachable by user nobody: "
        f"{program} is not executable (mode 0744, owner root)",
        f"the model file {unreadable} is not reachable by user nobody: "
        f"{unreadable} is not readable (mode 0640, owner root)",
        f"the model file {missing} is not reachable by user nobody: {missing} does not exist",
    ]


@as_root
def test_check_reachable_follows_links_into_private_directories(
    nobody: RunAs, open_dir: Path
) -> None:
    private = make_dir(open_dir / "private", 0o700)
    make_file(private / "x.gguf", 0o644)
    link = open_dir / "model.gguf"
    link.symlink_to(private / "x.gguf")
    assert access_problem(nobody, link, READ) == (
        f"{private} is not searchable (mode 0700, owner root)"
    )
    assert access_problem(nobody, open_dir / "private", SEARCH) == (
        f"{private} is not a regular file"
    )


@as_root
async def test_reachability_agrees_with_the_kernel(
    nobody: RunAs, open_dir: Path, nursery: trio.Nursery
) -> None:
    """Our reading of the bits against ``os.access`` run by the kernel as nobody itself."""
    nogroup = (0, nobody.gid)
    as_nobody = (nobody.uid, nobody.gid)
    shared = make_dir(open_dir / "shared", 0o711)
    private = make_dir(open_dir / "private", 0o700)
    group_dir = make_dir(open_dir / "group", 0o750, owner=nogroup)
    owned = make_dir(open_dir / "owned", 0o300, owner=as_nobody)
    files = [
        make_file(private / "f", 0o644),
        make_file(group_dir / "f", 0o604),
        *(make_file(shared / f"m{mode:o}", mode) for mode in (0o644, 0o600, 0o755, 0o711)),
        make_file(shared / "g640", 0o640, owner=nogroup),
        make_file(shared / "g620", 0o620, owner=nogroup),
        make_file(shared / "own077", 0o077, owner=as_nobody),
        make_file(shared / "own700", 0o700, owner=as_nobody),
        make_file(owned / "f", 0o644),
    ]
    dirs = [shared, private, group_dir, owned, make_dir(shared / "sub", 0o777)]
    cases = [(path, want, False) for path in files for want in (READ, WRITE, SEARCH)]
    cases += [(path, want, True) for path in dirs for want in (READ, SEARCH, WRITE | SEARCH)]
    code = (
        "import json, os, sys\n"
        "print(json.dumps([os.access(p, m) for p, m in json.loads(sys.argv[1])]))"
    )
    query = json.dumps([(str(path), want) for path, want, _ in cases])
    launch = Launch(SYSTEM_PYTHON, ("-c", code, query), open_dir)
    process = await ManagedProcess.spawn(nursery, launch, run_as=nobody)
    evidence = await process.wait_exited()
    assert evidence.exit_code == 0, evidence.stderr
    kernel = json.loads(evidence.stdout)
    ours = [access_problem(nobody, path, want, directory=d) is None for path, want, d in cases]
    disagreements = [case for case, k, o in zip(cases, kernel, ours, strict=True) if k != o]
    assert disagreements == []
    assert sum(kernel) not in (0, len(kernel))  # both verdicts occur


# --- the instance directory and the user switch -----------------------------------------------


@as_root
def test_prepare_instance_dir_hands_it_to_the_user(nobody: RunAs, open_dir: Path) -> None:
    instance = open_dir / "state" / "chat-1"
    prepare_instance_dir(instance, nobody)
    info = instance.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (
        nobody.uid,
        nobody.gid,
        0o700,
    )
    assert (open_dir / "state").stat().st_uid == 0  # only the instance directory changes hands
    check_reachable(nobody, directory=instance, files=[], program=SYSTEM_PYTHON)


@as_root
def test_prepare_instance_dir_refuses_a_link(nobody: RunAs, open_dir: Path) -> None:
    target = make_dir(open_dir / "elsewhere", 0o755)
    link = open_dir / "chat-1"
    link.symlink_to(target)
    with pytest.raises(BackendError, match="is a symbolic link; not handing its target"):
        prepare_instance_dir(link, nobody)
    assert target.stat().st_uid == 0


def test_prepare_instance_dir_without_run_as_only_creates(tmp_path: Path) -> None:
    instance = tmp_path / "state" / "chat-1"
    prepare_instance_dir(instance, None)
    assert instance.is_dir()
    assert instance.stat().st_uid == os.geteuid()


CHILD_REPORT = """
import ctypes, json, os, resource as r
libc = ctypes.CDLL(None)
sig = ctypes.c_int()
libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
with open("written-by-child", "w") as out:
    out.write("ok")
print(json.dumps({
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
    "groups": sorted(os.getgroups()),
    "limits": [r.getrlimit(r.RLIMIT_CORE), r.getrlimit(r.RLIMIT_NOFILE),
               r.getrlimit(r.RLIMIT_FSIZE)],
    "pdeathsig": sig.value,
}))
"""


@as_root
async def test_spawn_as_nobody_runs_the_child_unprivileged_and_contained(
    nobody: RunAs, open_dir: Path, nursery: trio.Nursery
) -> None:
    import resource

    instance = open_dir / "chat-1"
    prepare_instance_dir(instance, nobody)
    check_reachable(nobody, directory=instance, files=[], program=SYSTEM_PYTHON)
    launch = Launch(SYSTEM_PYTHON, ("-c", CHILD_REPORT), instance)
    process = await ManagedProcess.spawn(nursery, launch, run_as=nobody)
    evidence = await process.wait_exited()
    assert evidence.exit_code == 0, evidence.stderr
    report = json.loads(evidence.stdout)
    assert report["ids"] == [nobody.uid] * 2 + [nobody.gid] * 2
    assert report["groups"] == sorted(nobody.groups)
    nofile = clamp_limit(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    fsize = clamp_limit(1 << 44, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
    assert report["limits"] == [[0, 0], [nofile, nofile], [fsize, fsize]]
    if sys.platform.startswith("linux"):  # the user switch did not clear it
        assert report["pdeathsig"] == signal.SIGKILL
    assert (instance / "written-by-child").stat().st_uid == nobody.uid


@as_root
async def test_spawn_as_nobody_refuses_what_nobody_cannot_execute(
    nobody: RunAs, open_dir: Path, nursery: trio.Nursery
) -> None:
    program = make_file(open_dir / "server", 0o700, text="#!/bin/sh\necho hi\n")
    with pytest.raises(BackendError, match=f"cannot start {program}: .*Permission denied"):
        await ManagedProcess.spawn(nursery, Launch(program, (), open_dir), run_as=nobody)
