"""Issue 8 item 3, bounds on what a run file or registry may cost us, found by a hostile tester.

- A dotted key 100,000 segments deep (``a.a.a...=1``, 200 KB) took tomllib over 120 s and
  21 GB: nesting is now judged on the text BEFORE tomllib (`toml_depth.check_toml_depth`),
  in linear time, counting header segments, dotted-key segments and brackets outside
  strings, exactly as `check_tree` counts the parsed tree.
- A run file or registry that is a FIFO, a device (``/dev/zero``), a directory or larger
  than its cap (1 MiB, 16 MiB) is refused unread, naming the limit.
- A value echoed in a message is cut to about 200 characters, with its length.
"""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path

import pytest

from inferactors._config.convert import load_run_config, run_config_from_toml
from inferactors._config.toml_depth import check_toml_depth
from inferactors._errors import InvalidConfig, one_line, shown
from inferactors._models.registry_file import read_registry
from inferactors._safe_json import check_tree

MiB = 1 << 20


def refused(text: str) -> str:
    with pytest.raises(InvalidConfig) as caught:
        run_config_from_toml(text, Path("/etc/inferactors"), "run.toml: ")
    message = str(caught.value)
    assert "\n" not in message
    return message


def deep_message(line: int) -> str:
    return (
        "run.toml: TOML nested too deep (over 64 levels of tables, arrays or dotted keys) "
        f"at line {line}"
    )


@pytest.mark.parametrize(
    "text",
    [
        'node_id = "x"\n' + ".".join(["a"] * 100_000) + " = 1\n",
        'node_id = "x"\n[' + ".".join(["a"] * 100_000) + "]\n",
        'node_id = "x"\n[[' + ".".join(["a"] * 100_000) + "]]\n",
        'node_id = "x"\nx = { ' + ".".join(["a"] * 100_000) + " = 1 }\n",
        'node_id = "x"\n' + ".".join(f'"k{i}"' for i in range(100_000)) + " = 1\n",
    ],
    ids=["dotted-key", "table-header", "array-of-tables", "inline-table-key", "quoted-keys"],
)
def test_a_key_100000_segments_deep_is_refused_at_once_naming_its_line(text: str) -> None:
    started = time.process_time()  # CPU seconds: other processes on the machine do not count
    assert refused(text) == deep_message(2)
    assert time.process_time() - started < 1.0


def _cases(n: int) -> dict[str, str]:
    key = ".".join(["a"] * n)
    half = n // 2
    return {
        "dotted": f"{key} = 1\n",
        "dotted-to-table": f"{key} = {{x = 1}}\n",
        "header": f"[{key}]\nx = 1\n",
        "bare-header": f"[{key}]\n",
        "array-of-tables": f"[[{key}]]\nx = 1\n",
        "arrays": "a = " + "[" * n + "1" + "]" * n,
        "inline-tables": "a = " + "{b = " * n + "1" + "}" * n,
        "mixed": "[t.u]\nv.w = " + "[{x = " * half + "1.5" + "}]" * half,
        "header-and-key": f"[{'.'.join(['h'] * half)}]\n{'.'.join(['k'] * (n - half))} = 1\n",
    }


@pytest.mark.parametrize("n", [62, 63, 64, 65, 66])
@pytest.mark.parametrize("kind", sorted(_cases(1)))
def test_the_scan_judges_depth_exactly_as_the_parsed_tree_is_judged(kind: str, n: int) -> None:
    text = _cases(n)[kind]
    try:
        check_tree(tomllib.loads(text))
        tree_ok = True
    except InvalidConfig:
        tree_ok = False
    try:
        check_toml_depth(text)
        scan_ok = True
    except InvalidConfig:
        scan_ok = False
    assert scan_ok is tree_ok


def test_dots_and_brackets_inside_strings_and_comments_do_not_count() -> None:
    dots, brackets = ".".join(["x"] * 500), "[" * 500
    text = (
        f'node_id = "n"  # {dots} {brackets}\n'
        f'probe_timeout_s = 1.5\n# {brackets}\n[managed]\nregistry = "{dots}"\n'
        f'data_root = \'{brackets}\'\nenv = {{ A = """{brackets}\\"""{dots}""" }}\n'
        f"keep_alive = '''\n{brackets}\n{dots}'''\n"
    )
    check_toml_depth(text)


def test_a_long_flat_array_is_scanned_in_linear_time() -> None:
    text = "a = [" + "1.5, " * 200_000 + "]\n"
    started = time.process_time()
    check_toml_depth(text)
    assert time.process_time() - started < 2.0


# Files that are not what a run file or registry should be.


def special_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    return path


WHAT = {
    "fifo": "is not a regular file (a FIFO)",
    "dev-zero": "is not a regular file (a character device)",
    "directory": "is not a regular file (a directory)",
}


@pytest.mark.parametrize("kind", sorted(WHAT))
def test_a_run_file_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    path = special_file(tmp_path, kind)
    with pytest.raises(InvalidConfig) as caught:
        load_run_config(path)
    assert str(caught.value) == f"{path}: the run file {WHAT[kind]}"


@pytest.mark.parametrize("kind", sorted(WHAT))
def test_a_registry_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    path = special_file(tmp_path, kind)
    with pytest.raises(InvalidConfig) as caught:
        read_registry(path)
    assert str(caught.value) == f"{path}: the registry {WHAT[kind]}"


def test_a_run_file_over_1_mib_is_refused_naming_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text("# " + "x" * MiB + "\n")
    with pytest.raises(InvalidConfig) as caught:
        load_run_config(path)
    assert str(caught.value) == f"{path}: the run file is larger than its limit of 1 MiB"
    path.write_text("#" * (MiB - 1) + "\n")  # exactly 1 MiB is read
    assert load_run_config(path).instances == ()


def test_a_registry_over_16_mib_is_refused_naming_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    with path.open("wb") as sparse:
        sparse.truncate(16 * MiB + 1)
    with pytest.raises(InvalidConfig) as caught:
        read_registry(path)
    assert str(caught.value) == f"{path}: the registry is larger than its limit of 16 MiB"


# Messages that echo a value from input stay short.


def test_a_900_kb_node_id_is_echoed_cut_with_its_length() -> None:
    message = refused(f'node_id = "{"n" * 900_000} x"\n')
    assert message.startswith("run.toml: $.node_id must be a plain token (1-64 chars), got 'nnn")
    assert message.endswith("'... (900002 characters)")
    assert len(message) < 400


@pytest.mark.parametrize(
    "line",
    [
        "{key} = 1\n",
        '[[instances]]\nmode = "{key}"\n',
        '[[instances]]\nmode = "adopted"\nrole = "r"\nruntime = "infer.llamacpp"\n'
        'serve = {{ host = "{key}" }}\n',
        '[[instances]]\nmode = "adopted"\nrole = "r"\nruntime = "infer.llamacpp"\n'
        'serve = {{ extra_args = ["{key}"] }}\n',
        '[managed]\nregistry = "r"\ndata_root = "d"\nenv_passthrough = ["LLAMA_ARG_{key}"]\n',
    ],
    ids=["unknown-key", "enum", "host", "extra-args", "llama-arg-env"],
)
def test_other_echoed_values_are_cut_too(line: str) -> None:
    message = refused(line.format(key="k" * 500_000))
    assert len(message) < 600, message[:1000]


def test_shown_and_one_line_bound_what_they_print() -> None:
    assert shown("abc") == "'abc'"
    assert shown("x" * 1000) == repr("x" * 200) + "... (1000 characters)"
    assert shown(list(range(1000))).endswith("... (4890 characters)")
    assert one_line("a\nb") == "a\\nb"
    long = one_line("e" * 5000)
    assert long == "e" * 1000 + "... (message cut: 5000 characters)"
