"""`JsonAnswer`: a JSON answer whose bytes are always UTF-8.

Starlette's ``JSONResponse`` encodes its text as UTF-8 with ``ensure_ascii=False``: a string
holding a lone UTF-16 surrogate (a client's ``"\\ud800"``, echoed back in an error message
or a model name) raises ``UnicodeEncodeError`` while the answer is being made. `JsonAnswer`
writes it with `inferactors._safe_json.dump_json` instead, which keeps such a surrogate as
its ``\\uXXXX`` escape.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from .._safe_json import dump_json


class JsonAnswer(JSONResponse):
    """A ``JSONResponse`` that never fails to encode its text (module docstring)."""

    def render(self, content: Any) -> bytes:
        """``content`` as compact UTF-8 JSON (`dump_json`)."""
        return dump_json(content)
