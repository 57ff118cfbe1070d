"""``inferactors completion SHELL``: a shell completion script for the whole command line.

The script is generated from the CLI's own argparse parser by shtab (every command, option
and choice the parser knows, nothing written by hand), so it cannot drift from the CLI.
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "tcsh", "fish")
"""The shells shtab writes completion scripts for that an operator's terminal runs."""

COMPLETION_HELP = """Print a shell completion script for inferactors, made from its own parser.

  bash:  inferactors completion bash > ~/.local/share/bash-completion/completions/inferactors
  zsh:   inferactors completion zsh > ~/.zfunc/_inferactors   (with fpath+=(~/.zfunc))
  fish:  inferactors completion fish > ~/.config/fish/completions/inferactors.fish
  tcsh:  eval "`inferactors completion tcsh`"
"""


def add_completion_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    root: argparse.ArgumentParser,
) -> None:
    """Register ``inferactors completion``, which completes ``root`` (the whole CLI)."""
    parser = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh, fish)",
        description=COMPLETION_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=completion, root=root)


def completion(args: argparse.Namespace) -> int:
    """Print the completion script of ``args.shell`` for ``args.root``; exit 0."""
    import shtab

    print(shtab.complete(args.root, shell=args.shell), end="")
    return 0
