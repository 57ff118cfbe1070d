"""``inferactors models sign``: sign a model with OpenSSF Model Signing, for operators who
sign their own.

The signature is written by ``model-signing``'s own signing API (``_models/oms.py``), so its
``model_signing verify`` accepts it, and so does ``models add``. It signs every file of a
folder (but the signature itself and git's files) or the one file given, with SHA-256 by
default: the ``model_signing verify`` command of model-signing 1.1.1 checks SHA-256
signatures only. ``--hashing-algorithm blake3`` signs with BLAKE3, which the registry checks
against its pins with no second hash (model-signing's library verifies it; its command does
not).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .._atomic_file import write_atomically
from .._errors import InferactorsError, InvalidConfig
from .._models.oms import sign_model
from .._models.sign_inputs import check_target, signing_key_identity
from .._models.signed_add import SIGNATURE_NAME
from .._untrusted_file import read_capped
from .models_common import INTERRUPTED, fail

MAX_KEY_BYTES = 64 * 1024
"""The largest private key or certificate file read."""


def add_sign_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``models sign`` to the ``models`` subcommands."""
    sign = commands.add_parser(
        "sign", help="sign a model (a .gguf file or a folder) with OpenSSF Model Signing"
    )
    sign.add_argument("path", type=Path, help="a .gguf file or a model folder")
    sign.add_argument(
        "--private-key", type=Path, required=True, metavar="PEM",
        help="the signing key: unencrypted PEM, elliptic-curve P-256, P-384 or P-521",
    )  # fmt: skip
    sign.add_argument(
        "--certificate", type=Path, default=None, metavar="PEM",
        help="sign with this certificate for the key (the bundle carries it)",
    )  # fmt: skip
    sign.add_argument(
        "--chain", type=Path, action="append", default=[], metavar="PEM",
        help="the certificate's issuers, up to its root; repeatable",
    )  # fmt: skip
    sign.add_argument(
        "--signature", type=Path, default=None, metavar="SIG",
        help="where to write it (default: FOLDER/model.sig, or FILE.sig for a file)",
    )  # fmt: skip
    sign.add_argument(
        "--hashing-algorithm", choices=["sha256", "blake3"], default="sha256",
        help="the digest each file is signed with (default sha256, what model_signing verify "
        "checks; blake3 needs no second hash when the registry verifies it)",
    )  # fmt: skip
    sign.set_defaults(func=handle_sign)


def handle_sign(args: argparse.Namespace) -> int:
    """``models sign PATH --private-key KEY [--certificate C --chain ROOT] [--signature S]``.

    The key, the certificate and where the signature goes are checked before the model is
    read (``_models/sign_inputs.py``); the signature is written as a new file renamed over
    its name. Ctrl-C: one line, exit 130, nothing written."""
    path: Path = args.path
    try:
        if not (path.is_dir() or path.is_file()):
            raise InvalidConfig(f"path: {path} is not an existing file or folder")
        signature = args.signature or _default_signature(path)
        key = _check_pem(args.private_key, "--private-key")
        certificate = (
            None if args.certificate is None else _check_pem(args.certificate, "--certificate")
        )
        for pem in args.chain:
            _check_pem(pem, "--chain")
        identity = signing_key_identity(key, certificate)
        ignored = check_target(path, signature)
        data = sign_model(
            path,
            private_key=args.private_key,
            algorithm=args.hashing_algorithm,
            certificate=args.certificate,
            chain=args.chain,
            allow_symlinks=_has_symlinks(path),
            ignored=ignored,
        )
        write_atomically(signature, data)
    except KeyboardInterrupt:
        print("\ninferactors: interrupted: no signature written", file=sys.stderr)
        return INTERRUPTED
    except InvalidConfig as error:
        return fail(error, 2)
    except InferactorsError as error:
        return fail(error, 1)
    except OSError as error:
        return fail(InvalidConfig(f"{error.filename}: {error.strerror}"), 1)
    except ValueError as error:  # model-signing's refusals (a special file in the folder, ...)
        return fail(InvalidConfig(f"path: {path}: {error}"), 2)
    who = f"certificate {args.certificate}" if args.certificate else identity
    print(f"signed {path}: {signature} ({args.hashing_algorithm}, {who})")
    return 0


def _default_signature(path: Path) -> Path:
    return path / SIGNATURE_NAME if path.is_dir() else path.with_name(path.name + ".sig")


def _check_pem(path: Path, option: str) -> bytes:
    """A regular file of at most 64 KiB (the package reads it by path, unbounded)."""
    try:
        return read_capped(path, MAX_KEY_BYTES, "key file")
    except InvalidConfig as error:
        raise InvalidConfig(f"{option}: {error}") from None
    except OSError as error:
        raise InvalidConfig(f"{option}: cannot read {path}: {error.strerror}") from None


def _has_symlinks(path: Path) -> bool:
    """Whether a folder holds symbolic links (a Hugging Face snapshot: every file is one)."""
    if not path.is_dir():
        return False
    return any(
        os.path.islink(os.path.join(top, name))
        for top, _dirs, names in os.walk(path)
        for name in names
    )
