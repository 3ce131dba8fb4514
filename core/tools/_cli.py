"""The command-line shape both index tools share: ``prog INPUT [INDEX]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..errors import DlpipeError


def run_index_tool(
    argv: Sequence[str] | None,
    prog: str,
    description: str,
    input_name: str,
    input_help: str,
    make: Callable[[str, str | None], str],
) -> int:
    """Parse ``INPUT [INDEX]``, call ``make(input, index)``, print the index path; 1 on error."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(input_name, help=input_help)
    parser.add_argument(
        "index", nargs="?", help=f"the index file (default: {input_name.upper()}'s .idx)"
    )
    args = parser.parse_args(argv)
    try:
        path = make(getattr(args, input_name), args.index)
    except DlpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
