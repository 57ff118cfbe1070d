"""An instance's view names who signed its model (``status --json``, the control API)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from inferactors import InstanceState, InstanceStatus, InstanceView, ModelRegistry
from inferactors._actors.runtime import InferRuntime
from inferactors._config.convert_api import api_data
from inferactors._service.members import signer_of
from models.signing_support import key_anchors, make_key, oms_sign


def test_the_view_names_the_signer_the_registry_verified(tmp_path: Path, tiny_gguf: Path) -> None:
    model = Path(shutil.copy2(tiny_gguf, tmp_path / "tiny.gguf"))
    ops = make_key(tmp_path / "keys", "ops")
    signature = oms_sign(model, tmp_path / "tiny.gguf.sig", ops.private)
    registry = ModelRegistry.open(tmp_path / "models.json", anchors=key_anchors(ops=ops.public))
    registry.add(model, name="tiny", signature=signature)
    registry.add(model, name="plain")
    registry.resolve("tiny")
    runtime = cast(InferRuntime, SimpleNamespace(registry=registry))

    signer = signer_of(runtime, "tiny")

    assert signer is not None
    assert signer.startswith("ops: key sha256:")
    assert signer_of(runtime, "plain") is None
    assert signer_of(runtime, "gone") is None
    assert signer_of(cast(InferRuntime, SimpleNamespace(registry=None)), "tiny") is None
    view = InstanceView(
        "chat",
        "infer.llamacpp",
        "managed",
        "iid",
        InstanceStatus(InstanceState.RUNNING),
        signed_by=signer,
    )
    assert api_data(view)["signed_by"] == signer
