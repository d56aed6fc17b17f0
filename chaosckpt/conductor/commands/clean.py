"""``chaosckpt clean``: remove what killed chaosckpt runs left behind (sandboxes, job processes)."""

from __future__ import annotations

from pathlib import Path

import click

from chaosckpt.conductor import config as configs
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.runs import leftovers


@click.command("clean")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="The results folder to clean (default: the configured one, else chaosckpt-results).")
def command(out):
    """Stop job processes and remove sandboxes left by chaosckpt runs that were killed.

    Runs still going (in this or another terminal) are left alone; results and
    verdicts are kept. `run` and `suite` do the same when they start.
    """
    given = out is not None
    if out is None:
        out = configs.load(None, Path.cwd()).results
    if given and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory; give the results folder chaosckpt wrote into")
    if not out.is_dir() or not leftovers.report(out):
        click.echo(f"chaosckpt: nothing to clean in {out}", err=True)
