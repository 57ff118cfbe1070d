"""Pure decisions, with no I/O and no event loop: restart budget, status mapping, model
matching, launch argv, reply parsing, exposure classification, admission's checks.

May import `_models`, `_config` and the shared vocabulary, and no I/O library (trio, httpx,
psutil, socket, subprocess).
"""
