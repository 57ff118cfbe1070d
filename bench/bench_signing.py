"""What a signature adds to the pin check (issue 21): on the tiny model and on 1 GiB.

Each figure is a full check (``ModelRegistry.verify``: every file hashed from its
descriptor, then the signature verified), interleaved with its baseline in the same run:

* T1/T2/T3, the tiny GGUF (510 KiB): signed with BLAKE3, signed with SHA-256 (the digest
  ``model_signing`` signs with by default: computed in the same read as BLAKE3), unsigned
  (baseline B1).
* G1/G2, one 1 GiB random ``.gguf`` file under /tmp (deleted afterwards): the same,
  against the unsigned full check (baseline B2) and a plain BLAKE3 of the file by path
  (B3, what ``models add`` reads).
* C1, the cheap path a spawn pays (``pin`` + close, stamps as verified), signed with
  SHA-256, against the same unsigned (B4): the signature is not verified again.
* V1, the signature's own check (``oms.verify_signature``: parse, ECDSA P-256, the signed
  file list), no hashing.

Run: ``.venv/bin/python bench/bench_signing.py`` (about 1 minute; needs 1 GiB free in /tmp).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import MS, US, Row, Summary, print_context, print_table
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from inferactors import ModelRegistry
from inferactors._models.anchors import AnchorKind, TrustAnchors
from inferactors._models.hashing import blake3_file
from inferactors._models.oms import sign_model, verify_signature
from inferactors.testing import write_tiny_gguf

SIZE = 1 << 30
TINY_SAMPLES = 30
BIG_SAMPLES = 4
CHEAP_SAMPLES = 300


def _keys(folder: Path) -> tuple[Path, TrustAnchors]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "ops.key", folder / "ops.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, TrustAnchors.read([("ops", AnchorKind.PUBLIC_KEY, public)])


def _registries(
    folder: Path, model: Path, key: Path, anchors: TrustAnchors
) -> dict[str, ModelRegistry]:
    """Three registries of ``model``: unsigned, signed with BLAKE3, signed with SHA-256
    (each model a copy in a folder of its own, so each signature sits beside its file)."""
    made = {}
    for label in ("unsigned", "blake3", "sha256"):
        home = folder / label
        home.mkdir()
        copy = home / model.name
        os.link(model, copy)  # the same bytes, no second GiB on disk
        registry = ModelRegistry.open(home / "models.json", anchors=anchors)
        signature = None
        if label != "unsigned":
            signature = home / f"{model.name}.sig"
            signature.write_bytes(sign_model(copy, private_key=key, algorithm=label))
        registry.add(copy, name="m", signature=signature)
        made[label] = registry
    return made


def _full_check(registry: ModelRegistry) -> Callable[[], None]:
    def run() -> None:
        (check,) = registry.verify("m")
        assert check.ok, check.reason

    return run


def _cheap_pin(registry: ModelRegistry) -> Callable[[], None]:
    manifest = registry.get("m")
    registry.pin(manifest).close()  # the stamps as verified

    def run() -> None:
        registry.pin(manifest).close()

    return run


def _interleaved(runs: dict[str, Callable[[], object]], samples: int) -> dict[str, Summary]:
    times: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(samples):
        for key, run in runs.items():
            started = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - started)
    return {key: Summary.of(values) for key, values in times.items()}


def main() -> None:
    print_context("bench_signing")
    with tempfile.TemporaryDirectory(prefix="inferactors-bench-signing-") as scratch:
        folder = Path(scratch)
        key, anchors = _keys(folder)
        tiny = write_tiny_gguf(folder / "tiny" / "tiny.gguf")
        small = _registries(folder / "tiny", tiny, key, anchors)
        signature = (folder / "tiny" / "sha256" / "tiny.gguf.sig").read_bytes()
        got = _interleaved(
            {
                "T1": _full_check(small["blake3"]),
                "T2": _full_check(small["sha256"]),
                "B1": _full_check(small["unsigned"]),
                "V1": partial(verify_signature, signature, anchors),
            },
            TINY_SAMPLES,
        )
        cheap = _interleaved(
            {"C1": _cheap_pin(small["sha256"]), "B4": _cheap_pin(small["unsigned"])},
            CHEAP_SAMPLES,
        )
        print_table(
            "The tiny GGUF (510 KiB): a full check",
            [
                Row("signed, BLAKE3", got["T1"], baseline="B1"),
                Row("signed, SHA-256", got["T2"], baseline="B1"),
                Row("unsigned", got["B1"], key="B1"),
                Row("the signature's own check", got["V1"]),
            ],
            MS,
        )
        print_table(
            "The cheap path a spawn pays (pin + close), tiny GGUF",
            [
                Row("signed, SHA-256", cheap["C1"], baseline="B4"),
                Row("unsigned", cheap["B4"], key="B4"),
            ],
            US,
        )
        big_folder = folder / "big"
        big_folder.mkdir()
        big = big_folder / "big.gguf"
        with big.open("wb") as handle:
            for _ in range(SIZE // (64 << 20)):
                handle.write(os.urandom(64 << 20))
        large = _registries(big_folder, big, key, anchors)
        got = _interleaved(
            {
                "G1": _full_check(large["blake3"]),
                "G2": _full_check(large["sha256"]),
                "B2": _full_check(large["unsigned"]),
                "B3": partial(blake3_file, big),
            },
            BIG_SAMPLES,
        )
        print_table(
            "1 GiB random file: a full check",
            [
                Row("signed, BLAKE3", got["G1"], baseline="B2"),
                Row("signed, SHA-256 (same read)", got["G2"], baseline="B2"),
                Row("unsigned", got["B2"], key="B2"),
                Row("plain BLAKE3 by path", got["B3"], key="B3"),
            ],
            MS,
            notes=["the machine's other work shares its 2 cores: compare within this run only"],
        )
        shutil.rmtree(big_folder)


if __name__ == "__main__":
    main()
