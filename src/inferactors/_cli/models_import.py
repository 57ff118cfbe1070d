"""``inferactors models import``: register the models already on this machine."""

from __future__ import annotations

import argparse


def add_import_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``models import`` and its sources to the ``models`` subcommands."""
