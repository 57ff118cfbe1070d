"""Reading a llama-swap config (``config.yaml``) to draft run-file instances (pure; no I/O).

llama-swap (a proxy that starts one llama-server per model on demand) configures each model
as a ``cmd`` string under ``models.<id>``, with ``macros`` (global, and per model,
overriding them) substituted as ``${name}``, ``${env.NAME}`` from the environment, and the
automatic ``${PORT}`` (``startPort``, default 5800, one more for each model that uses it,
in the order of model ids) and ``${MODEL_ID}``; ``groups`` (or the newer ``matrix``) say
which models may run together. A ``cmd`` given with ``|`` may hold ``#`` comment lines.
(Format from llama-swap's ``config.example.yaml``.)

`read_llama_swap` parses the YAML with PyYAML's safe loader: anchors, aliases and ``<<``
merge keys are read (configs share model defaults that way), but the document may hold at
most 100 aliases and expand to at most 100,000 values counted as a walk would meet them,
so an alias bomb is refused in a few milliseconds; then the same depth and integer checks
as every config (`inferactors._safe_json.check_tree`). It substitutes the macros, each
``cmd`` expanding at most 10,000 references into at most 64 KiB (a macro bomb is refused,
naming the model), and splits each ``cmd`` as a shell would (``shlex``, never a shell);
`llama_swap_args.draft_of` turns the argv into a draft. What the run file has no place for
(groups, ``apiKeys``, ``ttl``, ``env``, ``proxy``, aliases, flags off the allowlist) is
listed as not carried, never dropped silently. A value taken from ``${env.NAME}`` is never
written into a draft or a message: it is shown as the reference (a secret such as an API
key is often passed that way).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import InvalidConfig, cut, shown
from .._safe_json import check_tree
from .llama_swap_args import SwapDraft, draft_of

DEFAULT_START_PORT = 5800
"""llama-swap's first ``${PORT}``."""

MAX_MODELS = 512
"""The most models one config may hold."""

MAX_MACRO_DEPTH = 16
"""The deepest macros may be nested in one another."""

MAX_EXPANSIONS = 10_000
"""The most macro references one ``cmd`` may expand, nested ones included."""

MAX_EXPANDED_CHARS = 64 * 1024
"""The longest one ``cmd`` may grow by macro expansion (characters)."""

MAX_ALIASES = 100
"""The most YAML aliases (``*name``) a config may hold."""

MAX_VALUES = 100_000
"""The most values (mappings, lists, scalars) a config may expand to, aliases counted each
time they are used."""

_MACRO_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}")
_REFERENCE = re.compile(r"\$\{([^}]{1,80})\}")
_RESERVED = frozenset({"PORT", "MODEL_ID"})
_PER_MODEL_KEYS = {
    "env": "the server's environment is the run file's [managed] env",
    "proxy": "inferactors probes the server at its own host and port",
    "ttl": "no idle unload for llama.cpp instances",
    "aliases": "no model aliases",
    "checkEndpoint": "inferactors' own health and readiness probes",
    "cmdStop": "a managed server is stopped with SIGTERM, a grace period, SIGKILL",
    "useModelName": "no upstream model renaming",
    "filters": "no request rewriting",
    "concurrencyLimit": "no per-model request limit",
    "unlisted": "no model listing of our own",
    "timeouts": "no proxy timeouts",
}


@attrs.frozen
class SwapSkip:
    """A model of the config that is not drafted, and why."""

    model_id: str
    why: str


@attrs.frozen
class LlamaSwapConfig:
    """What a llama-swap config holds for us: a draft or a skip per model (by id), and
    notes on what of the config as a whole is not carried (groups, matrix)."""

    models: tuple[SwapDraft | SwapSkip, ...]
    notes: tuple[str, ...] = ()


def read_llama_swap(text: str, env: Mapping[str, str]) -> LlamaSwapConfig:
    """Parse a llama-swap config and draft an instance for each model.

    Args:
        text: the YAML text.
        env: the environment ``${env.NAME}`` macros read.

    Raises:
        InvalidConfig: not YAML, an alias, nested too deep, not a mapping, no ``models``
            mapping, a malformed macro table or ``startPort``; naming the field
            (``models.qwen.cmd: expected a string``). A model's own problem skips it.
    """
    data = _load(text)
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise InvalidConfig("models: expected a mapping of model ids to their settings")
    if len(models) > MAX_MODELS:
        raise InvalidConfig(f"models: {len(models)} models, at most {MAX_MODELS} read")
    macros = _macros(data.get("macros", {}), "macros", env, {})
    port = data.get("startPort", DEFAULT_START_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise InvalidConfig(f"startPort: expected a port number, got {shown(port)}")
    drafts: list[SwapDraft | SwapSkip] = []
    for model_id in sorted(models, key=str):
        result, used_port = _model(str(model_id), models[model_id], macros, env, port)
        port += used_port
        drafts.append(result)
    return LlamaSwapConfig(tuple(drafts), _notes(data))


def _load(text: str) -> dict[str, Any]:
    import yaml  # PyYAML: imported here, for the command that reads such a file

    try:
        aliases = sum(isinstance(token, yaml.AliasToken) for token in yaml.scan(text))
        if aliases > MAX_ALIASES:
            raise InvalidConfig(f"{aliases} YAML aliases (*name), at most {MAX_ALIASES} read")
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InvalidConfig(f"not YAML: {cut(str(error).replace(chr(10), ' '), 300)}") from None
    except RecursionError:
        raise InvalidConfig("YAML nested too deep") from None
    if not isinstance(data, dict):
        raise InvalidConfig("expected a mapping at the top (models:, macros:, ...)")
    _check_size(data)
    check_tree(data)
    return data


def _check_size(data: object) -> None:
    """Refuse a document that expands (through aliases, which share one object each time
    they are used) to more than `MAX_VALUES` values; iterative, stops at the limit."""
    stack, seen = [data], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise InvalidConfig(
                f"the YAML expands to more than {MAX_VALUES} values through its aliases "
                "(an alias bomb?)"
            )
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _macros(
    obj: object, where: str, env: Mapping[str, str], outer: Mapping[str, str]
) -> dict[str, str]:
    """A macro table over ``outer`` (a model's own macros override the global ones), its
    values as written: they are substituted when used, so ``${default_ctx}`` inside a
    global macro takes a model's own ``default_ctx``."""
    if not isinstance(obj, dict):
        raise InvalidConfig(f"{where}: expected a mapping of names to values")
    macros = dict(outer)
    for name, value in obj.items():
        if not isinstance(name, str) or not _MACRO_NAME.fullmatch(name) or name in _RESERVED:
            raise InvalidConfig(f"{where}: {shown(name)} is not a macro name")
        if not isinstance(value, str | int | float | bool):
            raise InvalidConfig(f"{where}.{name}: expected a string, number or boolean")
        macros[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return macros


def substitute(
    text: str,
    macros: Mapping[str, str],
    env: Mapping[str, str],
    where: str,
    used: dict[str, str] | None = None,
) -> str:
    """``text`` with ``${env.NAME}`` and ``${name}`` replaced, macros within macros too
    (``PORT`` and ``MODEL_ID`` are left for the caller). Each environment variable read is
    recorded in ``used`` (name to value), when given.

    Raises:
        InvalidConfig: an unset environment variable, an unknown macro, macros nested
            more than 16 deep (a cycle), or more than 10,000 references expanded or 64 KiB
            produced (a macro bomb), naming ``where``.
    """
    return _Expansion(macros, env, where, {} if used is None else used).run(text, 0)


@attrs.define
class _Expansion:
    """One ``cmd``'s macro expansion, with its budget of references and characters."""

    macros: Mapping[str, str]
    env: Mapping[str, str]
    where: str
    used: dict[str, str]
    references: int = 0
    chars: int = 0

    def run(self, text: str, depth: int) -> str:
        if depth > MAX_MACRO_DEPTH:
            raise InvalidConfig(
                f"{self.where}: macros nested more than {MAX_MACRO_DEPTH} deep (a cycle?)"
            )
        result = _REFERENCE.sub(lambda match: self._one(match, depth), text)
        self.chars += len(result)
        if self.chars > MAX_EXPANDED_CHARS:
            raise InvalidConfig(
                f"{self.where}: macros expand to more than {MAX_EXPANDED_CHARS // 1024} KiB "
                "(a macro bomb?)"
            )
        return result

    def _one(self, match: re.Match[str], depth: int) -> str:
        self.references += 1
        if self.references > MAX_EXPANSIONS:
            raise InvalidConfig(
                f"{self.where}: more than {MAX_EXPANSIONS} macro references expanded "
                "(a macro bomb?)"
            )
        name = match.group(1)
        if name.startswith("env."):
            if name[4:] not in self.env:
                raise InvalidConfig(f"{self.where}: ${{{cut(name, 60)}}}: the variable is not set")
            self.used[name[4:]] = self.env[name[4:]]
            return self.env[name[4:]]
        if name in _RESERVED:
            return match.group(0)
        if name not in self.macros:
            raise InvalidConfig(f"{self.where}: ${{{cut(name, 40)}}} is not a defined macro")
        return self.run(self.macros[name], depth + 1)


def _model(
    model_id: str, settings: object, macros: Mapping[str, str], env: Mapping[str, str], port: int
) -> tuple[SwapDraft | SwapSkip, bool]:
    """The model's draft or skip, and whether its ``cmd`` took the next ``${PORT}``."""
    where = f"models.{cut(model_id, 60)}"
    uses_port = False
    used: dict[str, str] = {}
    try:
        if not isinstance(settings, dict):
            raise InvalidConfig(f"{where}: expected a mapping")
        cmd = settings.get("cmd")
        if not isinstance(cmd, str):
            raise InvalidConfig(f"{where}.cmd: expected a string")
        own = _macros(settings.get("macros", {}), f"{where}.macros", env, macros)
        text = substitute(_without_comments(cmd), own, env, f"{where}.cmd", used)
        uses_port = "${PORT}" in text
        text = text.replace("${PORT}", str(port)).replace("${MODEL_ID}", model_id)
        try:
            argv = shlex.split(text)
        except ValueError as error:
            raise InvalidConfig(f"{where}.cmd: {error}") from None
    except InvalidConfig as error:
        return SwapSkip(model_id, str(error)), uses_port
    extra = [f"{key}: {why}" for key, why in _PER_MODEL_KEYS.items() if key in settings]
    draft = draft_of(model_id, argv, not_carried=extra, from_env=used)
    return (SwapSkip(model_id, draft) if isinstance(draft, str) else draft), uses_port


def _without_comments(cmd: str) -> str:
    """The ``cmd`` lines without ``#`` comment lines, joined by spaces."""
    lines = [line for line in cmd.splitlines() if not line.strip().startswith("#")]
    return " ".join(lines)


def _notes(data: Mapping[str, Any]) -> tuple[str, ...]:
    notes = []
    groups = data.get("groups")
    if isinstance(groups, dict):
        for name, group in groups.items():
            members = group.get("members") if isinstance(group, dict) else None
            listed = ", ".join(str(m) for m in members) if isinstance(members, list) else "?"
            notes.append(
                f"groups.{cut(str(name), 60)} (members {cut(listed, 200)}): not carried; each "
                "instance is supervised on its own, none is swapped out for another"
            )
    if "matrix" in data:
        notes.append("matrix: not carried; each instance is supervised on its own")
    if "apiKeys" in data:
        notes.append(
            "apiKeys: not carried (the keys are not shown); each instance's server key is "
            "its serve.api_key_file"
        )
    return tuple(notes)
