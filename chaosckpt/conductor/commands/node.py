"""``chaosckpt node``: the node side of a multi-node trial, started by the conductor on each machine."""

from __future__ import annotations

import sys

import click


@click.command("node")
@click.option("--conductor", required=True, metavar="HOST:PORT", help="Where the conductor listens.")
@click.option("--node-rank", type=click.IntRange(0), required=True, metavar="K", help="This machine's node rank.")
def command(conductor: str, node_rank: int) -> None:
    """Run one machine's part of a multi-node trial (started by chaosckpt run --nnodes; not by hand).

    The trial's token comes on the first line of stdin. Exit status 2: no token; 3: the conductor could not
    be reached or was lost.
    """
    from chaosckpt.conductor.nodes import node

    sys.exit(node.main(conductor, node_rank))
