"""``chaosckpt scenarios``: what can be run."""

from __future__ import annotations

import click

from chaosckpt.conductor import scenario as scenarios


@click.command("scenarios")
def command():
    """List the built-in scenarios and their parameters."""
    for name in scenarios.builtin_names():
        scen = scenarios.load(name)
        click.echo(f"{name}\n    {scen.summary}")
        trigger = ", ".join(f"{k}={v}" for k, v in scen.params()["trigger"].items() if v is not None)
        click.echo(f"    parameters: {trigger}")
