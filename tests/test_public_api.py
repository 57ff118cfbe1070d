"""The public surface: `__all__` is sorted, complete, and every name resolves; the names
are imported on first use (the package itself loads none of its modules)."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

import inferactors
import inferactors.testing


def test_all_is_sorted_and_unique() -> None:
    for module in (inferactors, inferactors.testing):
        assert list(module.__all__) == sorted(set(module.__all__)), module.__name__


def test_all_lists_every_public_name_and_nothing_else() -> None:
    for module in (inferactors, inferactors.testing):
        for name in module.__all__:
            getattr(module, name)  # imported on first use: now in vars(module)
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert public == set(module.__all__), module.__name__


def test_every_exported_name_comes_from_a_private_module() -> None:
    for name in inferactors.__all__:
        value = getattr(inferactors, name)
        origin = getattr(value, "__module__", "inferactors._")
        assert origin.startswith("inferactors._") or name in {"Event", "Health"}, (name, origin)


def test_the_package_imports_without_the_dev_extra_helpers() -> None:
    # gguf, numpy and mlx are imported lazily by the tiny-model writers, not at import time,
    # so the runtime package works without the dev extra. A fresh interpreter tells.
    import subprocess
    import sys

    code = (
        "import sys, inferactors, inferactors.testing; "
        "print(sorted(m for m in ('gguf', 'numpy', 'mlx', 'safetensors') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_the_readme_python_examples_compile_and_import_what_exists() -> None:
    import ast
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parent.parent / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.DOTALL)
    assert blocks, "the README shows how to embed inferactors"
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "inferactors":
                for alias in node.names:
                    assert hasattr(inferactors, alias.name), alias.name


@pytest.mark.parametrize("module", [inferactors, inferactors.testing], ids=lambda m: m.__name__)
def test_the_lazy_table_the_type_checkers_imports_and_all_name_the_same(
    module: types.ModuleType,
) -> None:
    tree = ast.parse(Path(str(module.__file__)).read_text())
    checking = next(node for node in tree.body if isinstance(node, ast.If))  # TYPE_CHECKING
    imported: dict[str, str] = {}
    for node in checking.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, ast.unparse(node)  # an explicit re-export
            imported[alias.name] = "." * node.level + str(node.module)
    assert imported == module._LAZY
    assert sorted(imported) == module.__all__


def test_importing_the_package_loads_none_of_its_modules() -> None:
    code = (
        "import sys, inferactors, inferactors.testing; "
        "print(sorted(m for m in sys.modules if m.startswith('inferactors.') "
        "and m != 'inferactors.testing'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
