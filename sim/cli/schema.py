"""``clustersim schema KIND``: the JSON Schema of scenario, topology or profile files."""

from __future__ import annotations

import argparse
import sys

KINDS = ("scenario", "topology", "profile")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``schema`` subcommand."""
    p = sub.add_parser(
        "schema", help="print the JSON Schema of scenario, topology or profile files"
    )
    p.add_argument("kind", help=f"one of {', '.join(KINDS)}")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the schema (the shipped ``sim/schemas/KIND.schema.json`` is the same text)."""
    from sim.schemas import schema_text

    sys.stdout.write(schema_text(args.kind))
    return 0
