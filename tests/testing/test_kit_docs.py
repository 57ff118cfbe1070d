"""docs/testing.md names each fixture's type, as the plugin annotates it, and every field of
a recorded request, as the classes define them (issue 19 item 7)."""

from __future__ import annotations

import inspect
from pathlib import Path

import attrs

from inferactors.testing import RecordedRequest, pytest_plugin
from inferactors.testing._fake_launch import LoggedRequest

DOC = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()


def test_every_fixtures_type_is_named() -> None:
    table = DOC.split("### Their types")[1].split("\n\n")[1]
    rows = {
        name.strip(" `"): kind
        for line in table.splitlines()[2:]
        for names, kind in [line.strip("|").split("|")]
        for name in names.split(",")
    }
    fixtures = [name for name in pytest_plugin.PLAYERS] + [
        "inferactors_fakes", "tiny_gguf", "tiny_mlx_model", "inferactors_workspace",
        "inferactors_kit",
    ]  # fmt: skip
    for name in fixtures:
        returned = inspect.signature(getattr(pytest_plugin, name).__wrapped__).return_annotation
        shown = str(returned).removeprefix("Iterator[").removeprefix("AsyncIterator[")
        assert name in rows, name
        assert shown.rstrip("]").split(".")[-1] in rows[name], (name, shown, rows[name])


def test_every_field_of_a_recorded_request_is_named() -> None:
    for cl in (LoggedRequest, RecordedRequest):
        for field in attrs.fields(cl):
            assert f"`{field.name}`" in DOC, (cl.__name__, field.name)


def test_the_trio_marker_is_said_before_the_first_async_example() -> None:
    first_async = DOC.index("async with open_fake_server")
    assert "pytest.mark.trio" in DOC[:first_async]
    assert "trio_mode = true" in DOC[:first_async]


def test_no_kit_install_line_names_an_unpublished_package() -> None:
    """inferactors is not on PyPI: the kit is installed from a clone (``-e PATH[testing]``)."""
    root = Path(__file__).parents[2]
    places = [*root.glob("examples/**/*.py"), *root.glob("src/inferactors/testing/*.py")]
    places += [*root.glob("docs/*.md"), root / "README.md"]
    wrong = [str(p) for p in places if "pip install 'inferactors[testing" in p.read_text()]
    assert wrong == []
