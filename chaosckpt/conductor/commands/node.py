"""``chaosckpt node``: the node side of a multi-node trial, started by the conductor on each machine."""

from __future__ import annotations

import sys

import click


@click.command("node", context_settings={"ignore_unknown_options": True, "help_option_names": []}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args) -> None:
    """Run one machine's part of a multi-node trial (started by chaosckpt run --nnodes; not by hand)."""
    from chaosckpt.conductor.nodes import node

    sys.exit(node.main(list(args)))
