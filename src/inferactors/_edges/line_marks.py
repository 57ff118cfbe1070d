"""How a piece of a server's output line is marked when the line goes on in the next piece
(a constant; imports nothing, so the CLI's ``logs`` prints it without loading the edges)."""

from __future__ import annotations

CONTINUED = " [continues]"
"""Written after a piece of a long line that goes on in the next line (the log file, and
``inferactors logs``)."""
