"""Admission's part for issue 9 item 4: the binary's own flags, the projector and LoRA
adapters, and the API key (with their I/O).

- `check_binary_flags`: every ``extra_args`` flag must be one the serve program's
  ``--help`` lists (`ServeHelp`, cached by the program's digest); refused naming the flag
  and the program's version.
- `resolve_extras`: ``serve.mmproj`` and ``serve.lora`` resolved and verified by the
  registry like the model (and later pinned at every spawn like it, ``instance_pin.py``).
- `read_api_key`: ``serve.api_key_file`` read once, through one descriptor: a regular file
  of at most 4 KiB, owned by the user the server runs as, with no access for group or
  others, holding one line. The key itself never appears in a message.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio

from .._config.config import ManagedConfig
from .._config.spec import InferenceSpec
from .._edges.serve_help import CACHE_DIR, ServeHelp
from .._errors import AdmissionRefused, ModelError
from .._models.manifest import ResolvedModel
from .._models.registry import ModelRegistry
from .._policy.help_flags import check_known_flags
from .._policy.launch import check_format
from .._policy.privilege import RunAs
from .._untrusted_file import read_secret_line
from .capabilities import managed_version


async def check_binary_flags(
    spec: InferenceSpec,
    managed: ManagedConfig,
    program: Path,
    *,
    serve_help: ServeHelp,
    run_as: RunAs | None,
    euid: int,
) -> None:
    """Refuse an ``extra_args`` flag ``program`` does not list; nothing is run when the
    spec has no extra arguments.

    Raises:
        InvalidConfig: ``serve.extra_args[3]: --mlock is not a flag of PROGRAM (VERSION)``,
            or the help could not be read (timed out, no flags listed), naming the program.
    """
    if not spec.serve.extra_args:
        return
    known = await serve_help.known_flags(
        program,
        run_as=run_as,
        euid=euid,
        state_dir=managed.data_root / CACHE_DIR,
        version=partial(_version, spec, managed),
    )
    check_known_flags(spec.runtime, spec.serve.extra_args, known)


async def _version(spec: InferenceSpec, managed: ManagedConfig) -> str | None:
    return (await managed_version(spec.runtime, managed))[1]


async def resolve_extras(
    spec: InferenceSpec, registry: ModelRegistry
) -> tuple[ResolvedModel | None, tuple[ResolvedModel, ...]]:
    """The verified projector (or None) and LoRA adapters the spec names.

    Raises:
        AdmissionRefused: a name the registry does not know, a file that fails its pin, or
            a format the flavor cannot load (``serve.mmproj tiny-proj: ...``).
    """
    mmproj = None
    if spec.serve.mmproj is not None:
        mmproj = await _verified(spec, registry, "serve.mmproj", spec.serve.mmproj)
    lora = []
    for index, name in enumerate(spec.serve.lora):
        lora.append(await _verified(spec, registry, f"serve.lora[{index}]", name))
    return mmproj, tuple(lora)


async def _verified(
    spec: InferenceSpec, registry: ModelRegistry, field: str, name: str
) -> ResolvedModel:
    try:
        resolve = partial(registry.resolve, name, signed_by=spec.signed_by)
        model = await trio.to_thread.run_sync(resolve)
    except ModelError as error:
        raise AdmissionRefused(f"{field} {name}: {error}") from error
    check_format(spec.runtime, model)
    return model


async def read_api_key(path: str, *, run_as: RunAs | None, euid: int) -> str:
    """The key in ``path`` (module docstring), read in a worker thread.

    Raises:
        AdmissionRefused: missing or unreadable, not a regular file, over 4 KiB, not owned
            by the server's user (``run_as``, else us), readable or writable by group or
            others, holding a carriage return (a Windows line ending: llama-server would
            keep it in the key) or a control or non-ASCII byte, or not exactly one line of
            printable ASCII without spaces, ended by one optional ``\\n``.
    """
    owner = run_as.uid if run_as is not None else euid
    return await trio.to_thread.run_sync(_read_key, Path(path), owner)


_KEY_RULE = "must hold one line, the key: printable ASCII without spaces, not starting with '#'"


def _read_key(path: Path, owner: int) -> str:
    where = f"serve.api_key_file {path}"
    return read_secret_line(
        path,
        where=where,
        owner=owner,
        whose="the server's user",
        error=AdmissionRefused,
        rule=_KEY_RULE,
        not_regular="not a regular file (or a symbolic link)",
        group_use="read or write",
        size_first=True,
        owner_reads=True,
        check_line=partial(_check_key_line, where),
    )


def _check_key_line(where: str, body: bytes) -> None:
    """The key is the line before one optional ``\\n``, exactly what llama-server takes
    from ``--api-key-file`` (checked with the pinned build: ``sk\\r\\n`` is the key
    ``sk\\r``, which no client can send), so a ``\\r`` or any byte that is not printable
    ASCII is refused, saying where and never the key."""
    if b"\r" in body:
        raise AdmissionRefused(
            f"{where}: holds a carriage return (\\r, a Windows line ending); llama-server "
            "would keep it as part of the key and refuse every request: end the line with "
            "\\n only"
        )
    if any(map(_odd_byte, body)):
        raise AdmissionRefused(
            f"{where}: holds a control or non-ASCII character; the key must be printable "
            "ASCII (llama-server compares it byte for byte)"
        )
    if body.startswith(b"#"):
        raise AdmissionRefused(f"{where}: {_KEY_RULE}")


def _odd_byte(byte: int) -> bool:
    """A byte no key holds: a control character other than a line's ``\\n``, or not ASCII."""
    return byte != 0x0A and (byte < 0x20 or byte > 0x7E)
