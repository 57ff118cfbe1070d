"""A reload re-reads the trust anchor files (fake llama-servers, real processes, real
signatures): a key taken out of its anchor holds the instances it signed for down as
``tampered`` and the reload says so; an anchor added leaves running servers alone; the
signer shown is the one the last spawn verified."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from inferactors._models.registry import ModelRegistry
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from models.signing_support import KeyPair, key_anchors, make_key, oms_sign
from service.fleet_support import Entry, RunFile, pids, running, until


def _signer(fleet: Fleet, name: str) -> str | None:
    return next(view.signed_by for view in fleet.views() if view.name == name)


def _tampered(fleet: Fleet) -> bool:
    return fleet.view("chat").status.stop_reason == "tampered"


def _setup(kit: RuntimeKit) -> tuple[KeyPair, KeyPair, Path, Path]:
    """Keys ``ops`` and ``other`` (private keys outside the served tree), the anchor file
    (holding ops's key) and the signed model registered as ``signed``."""
    keys = kit.root / "keys"
    ops, other = make_key(keys, "ops"), make_key(keys, "other")
    anchor = keys / "anchor.pub"
    shutil.copy2(ops.public, anchor)
    model = kit.root / "models" / "signed.gguf"
    model.parent.mkdir()
    kit.registry()
    assert kit.tiny_gguf is not None
    shutil.copy2(kit.tiny_gguf, model)
    signature = oms_sign(model, model.with_name("signed.gguf.sig"), ops.private)
    for path in (model, signature, model.parent, keys, anchor):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    registry = ModelRegistry.open(kit.registry(), anchors=key_anchors(ops=ops.public))
    registry.add(model, name="signed", signature=signature)
    return ops, other, anchor, model


async def test_a_key_taken_out_of_its_anchor_file_holds_its_instance_down_at_reload(
    inferactors_kit: RuntimeKit,
) -> None:
    ops, other, anchor, _model = _setup(inferactors_kit)
    run = RunFile.create(inferactors_kit)
    run.managed = f'trust_anchors = [{{ name = "ops", public_key = "{anchor}" }}]'
    chat = Entry("chat", free_port(), model="signed", extra='signed_by = ["ops"]\n')
    plain = Entry("plain", free_port())
    run.write(chat, plain)
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat", "plain"))
        assert str(_signer(fleet, "chat")).startswith("ops: key sha256:")
        before = pids(fleet)

        shutil.copy2(other.public, anchor)  # ops's key is revoked: the file holds another
        result = await fleet.reload()

        assert (result.unchanged, result.refused) == (("chat", "plain"), ())
        ((name, why),) = result.tampered
        assert name == "chat"
        assert "signed by key sha256:" in why
        assert "none of the trust anchors (ops)" in why
        await until(fleet, _tampered, within_s=10)
        assert _signer(fleet, "chat") is None
        assert pids(fleet)["plain"] == before["plain"]
        assert fleet.view("chat").status.pid is None

        # the key is trusted again under a second anchor, added by a reload of its own
        shutil.copy2(ops.public, anchor)
        extra = inferactors_kit.root / "keys" / "extra.pub"
        shutil.copy2(other.public, extra)
        os.chmod(extra, 0o644)
        run.managed = (
            f'trust_anchors = [{{ name = "ops", public_key = "{anchor}" }}, '
            f'{{ name = "extra", public_key = "{extra}" }}]'
        )
        run.write(chat, plain)
        result = await fleet.reload()
        assert (result.revived, result.unchanged, result.refused) == (("chat",), ("plain",), ())
        await until(fleet, running("chat"))
        assert str(_signer(fleet, "chat")).startswith("ops: key sha256:")
        assert pids(fleet)["plain"] == before["plain"]


async def test_the_signer_shown_is_the_one_the_last_spawn_verified(
    inferactors_kit: RuntimeKit,
) -> None:
    ops, other, anchor, model = _setup(inferactors_kit)
    other_anchor = inferactors_kit.root / "keys" / "other-anchor.pub"
    shutil.copy2(other.public, other_anchor)
    os.chmod(other_anchor, 0o644)
    run = RunFile.create(inferactors_kit)
    run.managed = (
        f'trust_anchors = [{{ name = "ops", public_key = "{anchor}" }}, '
        f'{{ name = "corp", public_key = "{other_anchor}" }}]'
    )
    run.write(Entry("chat", free_port(), model="signed"))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat"))
        assert str(_signer(fleet, "chat")).startswith("ops: ")
        first = pids(fleet)["chat"]
        assert first is not None

        corp_signature = oms_sign(model, model.with_name("corp.sig"), other.private)
        os.chmod(corp_signature, 0o644)
        anchors = key_anchors(ops=ops.public, corp=other.public)
        registry = ModelRegistry.open(inferactors_kit.registry(), anchors=anchors)
        registry.remove("signed")
        registry.add(model, name="signed", signature=corp_signature)
        os.kill(first, signal.SIGKILL)  # a supervised restart spawns the entry as it is now

        await until(fleet, lambda f: pids(f)["chat"] not in (None, first))
        await until(fleet, lambda f: str(_signer(f, "chat")).startswith("corp: "))
