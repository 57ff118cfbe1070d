"""A ``data_root`` that exists before the supervisor is used only when private to its user:
one of another user is refused naming its path, owner and mode; one of ours that others may
write to (a Kubernetes ``emptyDir`` is 0777) is made private, unless it holds something of
another user's (a planted ``control.sock``), which refuses it. Refusals are `BackendError`
(``inferactors run`` exits 78: a restart cannot fix it)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from inferactors import BackendError
from inferactors._edges.state_lock import LOCK_NAME, acquire_state_lock

NOBODY = 65534


def test_a_world_writable_data_root_of_ours_is_made_private_and_locked(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    os.chmod(root, 0o1777)
    (root / "logs").mkdir()  # ours: kept
    lock = acquire_state_lock(root, 0o711)
    try:
        assert oct(root.stat().st_mode & 0o7777) == "0o711"
    finally:
        lock.release()


def another_users_directory(tmp_path: Path) -> Path:
    """A directory of another user: made and given to ``nobody`` (mode 0700) as root; as any
    other user, who may give nothing away (chown), root's ``/usr``."""
    if os.geteuid() != 0:
        usr = Path("/usr").resolve()
        if usr.stat().st_uid == os.geteuid():
            pytest.skip("/usr is this user's own: no directory of another user to use")
        return usr
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    os.chown(root, NOBODY, NOBODY)
    return root


def test_a_data_root_of_another_user_is_refused_naming_it(tmp_path: Path) -> None:
    root = another_users_directory(tmp_path)
    info = root.stat()
    with pytest.raises(BackendError) as refused:
        acquire_state_lock(root)
    said = str(refused.value)
    mode = stat.S_IMODE(info.st_mode)
    assert f"data_root {root} is owned by uid {info.st_uid} (mode {mode:04o})" in said
    assert f"not by this supervisor's user (uid {os.geteuid()})" in said
    assert root.stat().st_mode == info.st_mode  # untouched
    assert not (root / LOCK_NAME).exists()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="planting another user's socket needs root (chown to nobody)"
)
def test_a_shared_data_root_holding_a_planted_socket_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    os.chmod(root, 0o777)
    planted = root / "control.sock"
    with socket.socket(socket.AF_UNIX) as impostor:
        impostor.bind(str(planted))
        os.chown(planted, NOBODY, NOBODY)
        with pytest.raises(BackendError) as refused:
            acquire_state_lock(root)
    said = str(refused.value)
    assert f"was writable by others (mode 0777) and holds {planted} of uid {NOBODY}" in said
    assert not root.stat().st_mode & 0o022  # nobody can plant more meanwhile
