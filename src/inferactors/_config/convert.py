"""Loading config text (TOML, JSON) into inferactors' frozen values, and specs back to JSON.

Parsed TOML or JSON goes through the one converter (`convert_hooks.converter`) into
`InferenceSpec` and `RunConfig`. Every failure is `InvalidConfig` whose message names the
path, e.g. ``$.instances[0].serve.port: expected int, got string``; a syntax error names the
line. Structured specs and run files are then ``validate()``d. Unknown keys are refused;
fields that are empty or at their default are left out when serializing.

Hostile text is refused the same way, never with a traceback: JSON goes through the one safe
parser (`inferactors._safe_json.parse_json`: depth, duplicate keys, huge integers), and
parsed TOML through its `check_tree`, after `toml_depth.check_toml_depth` has scanned the
text for nesting (tables, dotted keys, arrays) past 64 levels; a nesting bomb that still
exhausts the parser's recursion, or an integer past Python's 4,300-digit limit, is caught
and refused too (`toml_text.parse_toml`). The file itself is read by
`inferactors._untrusted_file.read_capped`: a regular file of at most 1 MiB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from .._errors import InvalidConfig, cut
from .._safe_json import parse_json
from .._untrusted_file import read_capped_text
from .convert_hooks import converter, describe_error
from .runfile import RunConfig
from .spec import InferenceSpec
from .toml_text import MAX_RUN_FILE_BYTES as MAX_RUN_FILE_BYTES
from .toml_text import parse_toml as _parse_toml


def _structure_or_refuse(data: object, cl: type[Any], source: str) -> Any:
    try:
        return converter.structure(data, cl)
    except InvalidConfig:
        raise
    except Exception as error:
        lines = describe_error(error)
        summary = lines[0] if len(lines) == 1 else f"{len(lines)} problems: " + "; ".join(lines)
        raise InvalidConfig(f"{source}{summary}") from None


def _validated_spec(spec: InferenceSpec, source: str) -> InferenceSpec:
    try:
        spec.validate()
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}$.{error}") from None
    return spec


# ---- public entry points ----------------------------------------------------------------


def spec_from_dict(data: object) -> InferenceSpec:
    """Structure and validate a spec from parsed TOML or JSON (a mapping).

    Raises:
        InvalidConfig: an unknown key, a missing or mistyped field, or a broken rule of
            `InferenceSpec.validate`; the message starts with the path (``$.serve.port``).
    """
    spec = _structure_or_refuse(data, InferenceSpec, "")
    return _validated_spec(spec, "")


def checked_spec(spec: InferenceSpec) -> InferenceSpec:
    """``spec`` as the run file would have made it: a spec built in Python goes through the
    one converter and back, so a value of the wrong type (``port=True``, ``port=8090.7``,
    ``ctx="4k"``) is refused in the run file's words, and what is returned holds plain
    values (tuples, not generators; ``str`` and ``int``, not subclasses of them).

    Raises:
        InvalidConfig: naming the path, e.g. ``$.serve.port: expected int, got bool``.
    """
    try:
        data = converter.unstructure(spec)
    except Exception as error:  # a value the converter cannot even read back
        why = f"{type(error).__name__}: {cut(str(error))}"
        raise InvalidConfig(f"$: not a valid spec: {why}") from None
    checked: InferenceSpec = _structure_or_refuse(data, InferenceSpec, "")
    return checked


def spec_from_toml(text: str) -> InferenceSpec:
    """Parse a spec from TOML text (top-level keys, ``[serve]`` and ``[memory]`` tables).

    Raises:
        InvalidConfig: a TOML syntax error (the message names line and column) or as
            `spec_from_dict`.
    """
    return spec_from_dict(_parse_toml(text, ""))


def spec_from_json(text: str) -> InferenceSpec:
    """Parse a spec from a JSON object.

    Raises:
        InvalidConfig: a JSON syntax error (with line and column), a duplicate key, nesting
            over 64 levels, an integer over 100 digits (see `inferactors._safe_json`), or as
            `spec_from_dict`.
    """
    return spec_from_dict(parse_json(text))


def spec_to_json(spec: InferenceSpec) -> str:
    """Serialize a spec to compact JSON, leaving out every field that is None, empty or at
    its default (so ``spec_from_json(spec_to_json(s)) == s``)."""
    return json.dumps(converter.unstructure(spec), separators=(",", ":"))


def run_config_from_toml(text: str, base_dir: Path, source: str = "") -> RunConfig:
    """Parse and validate a run file's text; relative paths resolve against ``base_dir``.

    Args:
        text: The TOML text.
        base_dir: Directory relative paths (registry, data_root, serve programs, trust
            anchor files) start from.
        source: Prefix for messages, e.g. ``"run.toml: "``.

    Raises:
        InvalidConfig: a syntax error, an unknown key, a mistyped value or a broken rule;
            the message names the path, e.g. ``$.instances[0].serve.port: expected int``.
    """
    data = _parse_toml(text, source)
    config: RunConfig = _structure_or_refuse(data, RunConfig, source)
    config = _resolve_paths(config, base_dir)
    try:
        config.validate()
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}{error}") from None
    return config


def load_run_config(path: Path) -> RunConfig:
    """Read and validate the run file at ``path`` (see `run_config_from_toml`).

    Raises:
        InvalidConfig: the file cannot be read, is not a regular file or is over 1 MiB
            (`inferactors._untrusted_file.read_capped`), or as `run_config_from_toml`; the
            message starts with the file's path.
    """
    try:
        text = read_capped_text(path, MAX_RUN_FILE_BYTES, "run file")
    except OSError as error:
        raise InvalidConfig(f"{path}: cannot read the run file: {error}") from None
    return run_config_from_toml(text, path.parent, f"{path}: ")


def _resolve_paths(config: RunConfig, base_dir: Path) -> RunConfig:
    door = config.front_door
    if door is not None and door.api_key_file is not None:
        door = attrs.evolve(door, api_key_file=base_dir / door.api_key_file)
        config = attrs.evolve(config, front_door=door)
    managed = config.managed
    if managed is None:
        return config
    programs = tuple((flavor, base_dir / program) for flavor, program in managed.serve_programs)
    anchors = tuple(
        attrs.evolve(
            anchor,
            public_key=None if anchor.public_key is None else base_dir / anchor.public_key,
            certificate=None if anchor.certificate is None else base_dir / anchor.certificate,
        )
        for anchor in managed.trust_anchors
    )
    managed = attrs.evolve(
        managed,
        registry=base_dir / managed.registry,
        data_root=base_dir / managed.data_root,
        serve_programs=programs,
        trust_anchors=anchors,
    )
    return attrs.evolve(config, managed=managed)
