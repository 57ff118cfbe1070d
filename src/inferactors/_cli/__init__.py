"""The ``inferactors`` command: the only place that calls ``trio.run``.

May import everything. Nothing imports it but ``__main__`` and the console script
(``_inferactors_boot``), which call `main.main`. Nothing is imported here: the client
commands (``status``, ``logs``, ...) load only what they need (`main.CLIENT_COMMANDS`).
"""
