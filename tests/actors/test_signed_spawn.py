"""A spec's ``signed_by`` at load and at every spawn, through the instance actor's own pin
check (no change to it): an unsigned model is refused at load naming the signer found and
the anchors expected; a registry entry swapped for an unsigned model, or a signature file
replaced, after the load holds the instance down as ``tampered`` with a `ModelTampered`
event, exactly as a changed byte does. Played by the fake server program."""

from __future__ import annotations

import attrs
import pytest
import trio

from actors.pin_support import WAIT_S, PinLab, chat
from e2e.field_support import Recorder
from inferactors import (
    AdmissionRefused,
    InferConfig,
    InferenceSpec,
    InstanceState,
    ModelRegistry,
    ModelTampered,
    PinMismatch,
    open_runtime,
)
from inferactors._actors.registry_open import trust_anchors
from inferactors._config.trust import TrustAnchorEntry
from inferactors._models.anchors import TrustAnchors
from models.signing_support import KeyPair, make_key, oms_sign


@attrs.frozen
class SignedLab:
    lab: PinLab
    ops: KeyPair

    def config(self) -> InferConfig:
        config = self.lab.config(self.lab.fake_program())
        assert config.managed is not None
        anchors = (TrustAnchorEntry("ops", public_key=self.ops.public),)
        return attrs.evolve(config, managed=attrs.evolve(config.managed, trust_anchors=anchors))

    def register(self, *, signed: bool) -> None:
        """Register the lab's model as ``tiny`` again, with or without its signature."""
        registry = ModelRegistry.open(self.lab.registry, anchors=self._anchors())
        registry.remove("tiny")
        signature = self.lab.model.with_name("model.sig") if signed else None
        registry.add(self.lab.model, name="tiny", signature=signature)

    def _anchors(self) -> TrustAnchors:
        """The anchors as the runtime reads them (`registry_open.trust_anchors`)."""
        managed = self.config().managed
        assert managed is not None
        return trust_anchors(managed)


@pytest.fixture
def signed_lab(pin_lab: PinLab) -> SignedLab:
    ops = make_key(pin_lab.root / "keys", "ops")
    oms_sign(pin_lab.model, pin_lab.model.with_name("model.sig"), ops.private)
    lab = SignedLab(pin_lab, ops)
    lab.register(signed=True)
    return lab


def _requiring_ops(port: int) -> InferenceSpec:
    return attrs.evolve(chat(port), signed_by=("ops",))


async def test_a_signed_model_loads_and_its_signer_is_in_the_plan(
    signed_lab: SignedLab, free_port: int
) -> None:
    async with open_runtime(signed_lab.config()) as runtime:
        admission = await runtime.admit(_requiring_ops(free_port))
        (note,) = [n for n in admission.notes if n.startswith("model tiny")]
        assert note.startswith("model tiny (gguf) verified, signed by ops: key sha256:")
        handle = await runtime.load(_requiring_ops(free_port))
        await runtime.start(handle)
        with trio.fail_after(WAIT_S):
            await runtime.wait_state(handle, InstanceState.RUNNING)


async def test_an_unsigned_model_is_refused_at_load_naming_signer_and_anchors(
    signed_lab: SignedLab, free_port: int
) -> None:
    signed_lab.register(signed=False)
    async with open_runtime(signed_lab.config()) as runtime:
        with pytest.raises(AdmissionRefused) as refused:
            await runtime.load(_requiring_ops(free_port))
    assert "model tiny: model tiny is not ready: not signed by any of the trust anchors ops: " in (
        str(refused.value)
    )
    assert "unsigned (no signature registered)" in str(refused.value)


async def test_an_entry_swapped_for_an_unsigned_model_after_load_is_held_as_tampered(
    signed_lab: SignedLab, free_port: int
) -> None:
    async with open_runtime(signed_lab.config()) as runtime:
        log = Recorder(await runtime.subscribe())
        handle = await runtime.load(_requiring_ops(free_port))
        signed_lab.register(signed=False)  # someone who may write the registry, not sign

        with pytest.raises(PinMismatch) as refused:
            await runtime.start(handle)

        why = "not signed by any of the trust anchors ops: unsigned (no signature registered)"
        assert refused.value.why == why
        await log.next(ModelTampered)
        (event,) = log.of(ModelTampered)
        assert (event.model, event.why) == ("tiny", why)
        status = runtime.status(handle)
        assert (status.state, status.stop_reason) == (InstanceState.EXITED, "tampered")


async def test_a_replaced_signature_holds_the_instance_down(
    signed_lab: SignedLab, free_port: int
) -> None:
    async with open_runtime(signed_lab.config()) as runtime:
        handle = await runtime.load(_requiring_ops(free_port))
        mallory = make_key(signed_lab.lab.root / "keys", "mallory")
        oms_sign(signed_lab.lab.model, signed_lab.lab.model.with_name("model.sig"), mallory.private)

        with pytest.raises(PinMismatch) as refused:
            await runtime.start(handle)

        assert refused.value.shard == "model.sig"
        assert refused.value.why.startswith("signature model.sig: ")
        status = runtime.status(handle)
        assert status.stop_reason == "tampered"
