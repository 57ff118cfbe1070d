"""One llama-swap model's server argv as a run-file instance draft (pure; no I/O).

`draft_of` walks the argv of llama-server (or mlx_lm.server) as its own flag table reads
it: the model file (``-m``/``--model``) and those the run file names by registry model
(``-md``/``--model-draft``, ``--mmproj``, ``--lora``) become paths to register; ``--port``,
``-c``/``--ctx-size``, a loopback ``--host`` and equal ``-ctk``/``-ctv`` become the typed
fields; every other flag is carried into ``serve.extra_args`` only if the allowlist takes
it with its value (``allowlist.check_extra_args``), else listed as not carried with the
allowlist's reason. No secret is written into a draft or a line about it: the value of a
flag that takes one (``--api-key``, ``--hf-token``) is shown as ``<secret>``, and a value
that came from the environment (``${env.NAME}``, often how a key is passed) is not carried
and is shown as that reference.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath

import attrs

from .._errors import InvalidConfig, cut
from .._flavor import InferFlavor
from .allowlist import MAX_EXTRA_ARGS, check_extra_args
from .flag_rules import FlagRule, rules_of, typed_field

_MODEL = ("-m", "--model")
_DRAFT = ("-md", "--model-draft")
_PATHS = {"--mmproj": "mmproj", "--lora": "lora"}
_PORT = ("--port",)
_CTX = ("-c", "--ctx-size")
_HOST = ("--host",)
_KV = {"-ctk": "k", "--cache-type-k": "k", "-ctv": "v", "--cache-type-v": "v"}
_ROLE = re.compile(r"[^A-Za-z0-9._+:-]")
_SECRET = "<secret>"
_MIN_HIDDEN_CHARS = 4
"""An environment value this long or longer is hidden wherever it appears in a value; a
shorter one (``8`` threads) only when it is the whole value."""


@attrs.frozen
class SwapDraft:
    """A run-file instance drafted from one llama-swap model.

    Attributes:
        model_id: the model's id in the llama-swap config.
        role: the instance's role: the id made a plain token.
        flavor: llama-server or mlx_lm.server.
        program: the server program its ``cmd`` runs, as written there.
        model: the model file or folder its ``cmd`` names, as written there.
        draft_model, mmproj, lora: the other files it names, as written there.
        port, ctx, host, kv_quant: the typed fields taken from its flags.
        extra_args: the flags the allowlist takes, with their values.
        not_carried: what is left out, each with why.
    """

    model_id: str
    role: str
    flavor: InferFlavor
    program: str
    model: str
    draft_model: str | None = None
    mmproj: str | None = None
    lora: tuple[str, ...] = ()
    port: int | None = None
    ctx: int | None = None
    host: str | None = None
    kv_quant: str | None = None
    extra_args: tuple[str, ...] = ()
    not_carried: tuple[str, ...] = ()


def draft_of(
    model_id: str,
    argv: Sequence[str],
    *,
    not_carried: Sequence[str] = (),
    from_env: Mapping[str, str] | None = None,
) -> SwapDraft | str:
    """The draft for ``argv`` (its program first), or why none can be made.

    ``not_carried`` starts the draft's list (the model's own settings left out);
    ``from_env`` (variable name to value) is what ``${env.NAME}`` put into ``argv``: such
    a value is never carried into ``extra_args`` and is shown as its reference.
    """
    flavor, args = _flavor(argv)
    if flavor is None:
        program = cut(PurePath(argv[0]).name if argv else "nothing", 60)
        return f"cmd runs {program}, not llama-server or mlx_lm.server"
    walk = _Walk(flavor, list(not_carried), _Hidden(from_env or {}))
    walk.run(args)
    walk.left = [walk.hidden.mask(line) for line in walk.left]
    if walk.model is None:
        return "cmd names no model file (-m or --model)"
    kv = set(walk.kv.values())
    if len(kv) == 1 and len(walk.kv) == 2:
        kv_quant = kv.pop()
    else:
        kv_quant = None
        walk.left.extend(f"{flag} {value}: -ctk and -ctv differ" for flag, value in walk.kv.items())
    return SwapDraft(
        model_id=model_id,
        role=_ROLE.sub("-", model_id)[:64].lstrip("-._+:") or "model",
        flavor=flavor,
        program="mlx_lm.server" if PurePath(argv[0]).name.startswith("python") else argv[0],
        model=walk.model,
        draft_model=walk.paths.get("draft"),
        mmproj=walk.paths.get("mmproj"),
        lora=tuple(walk.lora),
        port=walk.port,
        ctx=walk.ctx,
        host=walk.host,
        kv_quant=kv_quant,
        extra_args=tuple(walk.extra),
        not_carried=tuple(walk.left),
    )


def _flavor(argv: Sequence[str]) -> tuple[InferFlavor | None, list[str]]:
    if not argv:
        return None, []
    program = PurePath(argv[0]).name
    if "llama-server" in program:
        return InferFlavor.LLAMACPP, list(argv[1:])
    if program.startswith("mlx_lm.server"):
        return InferFlavor.MLX_LM, list(argv[1:])
    if program.startswith("python") and list(argv[1:3]) == ["-m", "mlx_lm.server"]:
        return InferFlavor.MLX_LM, list(argv[3:])
    return None, []


@attrs.frozen
class _Hidden:
    """The environment's values a ``cmd`` used, by variable name."""

    values: Mapping[str, str]

    def references(self, text: str) -> list[str]:
        """``${env.NAME}`` for each variable whose value is in ``text``."""
        return [
            f"${{env.{name}}}"
            for name, value in self.values.items()
            if value and (value == text or (len(value) >= _MIN_HIDDEN_CHARS and value in text))
        ]

    def mask(self, text: str) -> str:
        """``text`` with each hidden value replaced by its reference."""
        for name, value in sorted(self.values.items(), key=lambda item: -len(item[1])):
            if len(value) >= _MIN_HIDDEN_CHARS:
                text = text.replace(value, f"${{env.{name}}}")
        return text


@attrs.define
class _Walk:
    flavor: InferFlavor
    left: list[str]
    hidden: _Hidden
    model: str | None = None
    paths: dict[str, str] = attrs.field(factory=dict)
    lora: list[str] = attrs.field(factory=list)
    port: int | None = None
    ctx: int | None = None
    host: str | None = None
    kv: dict[str, str] = attrs.field(factory=dict)
    extra: list[str] = attrs.field(factory=list)

    def run(self, args: list[str]) -> None:
        rules = rules_of(self.flavor)
        index = 0
        while index < len(args):
            flag, value, inline = _split(args[index])
            takes = self._takes(flag, rules)
            if takes is None:  # a flag we do not know: a value follows if one is there
                takes = index + 1 < len(args) and not args[index + 1].startswith("-")
            if takes and value is None and index + 1 < len(args):
                value = args[index + 1]
                index += 1
            index += 1
            if not flag.startswith("-"):
                self.left.append(f"{cut(flag, 80)}: not a flag")
                continue
            self._one(flag, value if takes or inline else None)

    def _takes(self, flag: str, rules: Mapping[str, FlagRule]) -> bool | None:
        """Whether a value follows ``flag``; None for a flag on no list of ours."""
        known = (*_MODEL, *_DRAFT, *_PATHS, *_PORT, *_CTX, *_HOST, *_KV)
        if flag in known:
            return True
        rule = rules.get(flag)
        return None if rule is None else rule.arity == 1

    def _one(self, flag: str, value: str | None) -> None:
        if flag in _MODEL and value is not None:
            self.model = value
        elif flag in _DRAFT and value is not None:
            self.paths["draft"] = value
        elif flag == "--mmproj" and value is not None:
            self.paths["mmproj"] = value
        elif flag == "--lora" and value is not None:
            self.lora.append(value)
        elif flag in _PORT:
            self.port = _int(value, 1, 65535)
            self._unless(self.port is None, flag, value, "not a port number")
        elif flag in _CTX:
            self.ctx = _int(value, 1, 0xFFFF_FFFF)
            self._unless(self.ctx is None, flag, value, "not a context size")
        elif flag in _HOST:
            self._host(flag, value)
        elif flag in _KV and value is not None:
            self.kv[flag] = value
        else:
            self._extra(flag, value)

    def _host(self, flag: str, value: str | None) -> None:
        try:
            loopback = value == "localhost" or ipaddress.ip_address(value or "").is_loopback
        except ValueError:
            loopback = False
        if loopback:
            self.host = value
        else:
            self.left.append(f"{flag} {cut(value or '', 60)}: only loopback binds are managed")

    def _extra(self, flag: str, value: str | None) -> None:
        typed = typed_field(self.flavor, flag)
        if value is not None and typed is not None and typed.takes == "a secret":
            instead = f"use {typed.field}" if typed.field else "no field replaces it"
            self.left.append(f"{flag} {_SECRET}: takes a secret, never carried; {instead}")
            return
        references = [] if value is None else self.hidden.references(value)
        if references:
            self.left.append(
                f"{flag} {cut(self.hidden.mask(value or ''), 80)}: its value comes from the "
                f"environment ({', '.join(references)}), never written into the draft; "
                "write it in yourself"
            )
            return
        entry = [flag] if value is None else [flag, value]
        try:
            check_extra_args(self.flavor, entry)
        except InvalidConfig as error:
            why = str(error).split(": ", 1)[-1]
            self.left.append(f"{cut(' '.join(entry), 80)}: {cut(why, 160)}")
            return
        if len(self.extra) + len(entry) > MAX_EXTRA_ARGS:
            self.left.append(f"{cut(' '.join(entry), 80)}: over {MAX_EXTRA_ARGS} extra_args")
            return
        self.extra.extend(entry)

    def _unless(self, ok: bool, flag: str, value: str | None, why: str) -> None:
        if ok:
            self.left.append(f"{flag} {cut(value or '', 40)}: {why}")


def _split(arg: str) -> tuple[str, str | None, bool]:
    """``--flag=value`` as its flag and value (``inline`` true), else the word alone."""
    if arg.startswith("--") and "=" in arg:
        flag, value = arg.split("=", 1)
        return flag, value, True
    return arg, None, False


def _int(value: str | None, lo: int, hi: int) -> int | None:
    if value is None or not re.fullmatch(r"[0-9]{1,10}", value):
        return None
    number = int(value)
    return number if lo <= number <= hi else None
