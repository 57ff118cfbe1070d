"""The README's allowlist table is the code's (issue 9 item 4): generated from
``_config/flag_rules.py`` and kept equal to it."""

from __future__ import annotations

import re
from pathlib import Path

from inferactors._config.flag_rules import FLAG_RULES, TYPED_FIELDS, allowlist_table

README = Path(__file__).parents[2] / "README.md"
SECTION = re.compile(r"<!-- allowlist:begin[^>]*-->\n(.*?)\n<!-- allowlist:end -->", re.S)


def test_the_readme_table_is_generated_from_the_rules() -> None:
    found = SECTION.search(README.read_text())
    assert found is not None, "README.md lacks the allowlist markers"
    assert found.group(1) == allowlist_table(), (
        "README.md's allowlist is stale: paste inferactors._config.flag_rules.allowlist_table()"
    )


def test_the_table_has_one_row_per_rule_and_typed_field() -> None:
    rows = allowlist_table().splitlines()[2:]
    assert len(rows) == len(FLAG_RULES) + len(TYPED_FIELDS)
    assert "| `-fa`, `--flash-attn` | llama-server | one of `on`, `off`, `auto` |" in rows
    assert any("`--mmproj`" in row and "use `serve.mmproj`" in row for row in rows)
