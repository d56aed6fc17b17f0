"""``chaosckpt scenarios``: what can be run."""

from __future__ import annotations

import json

import click

from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.results.envelope import envelope


@click.command("scenarios")
@click.option("--json", "as_json", is_flag=True, help="Print the scenarios as one JSON document.")
def command(as_json):
    """List the built-in scenarios and their parameters."""
    loaded = [scenarios.load(name) for name in scenarios.builtin_names()]
    if as_json:
        click.echo(json.dumps(envelope(scenarios=[
            {"name": scen.name, "summary": scen.summary, "fault": scen.fault, "params": scen.params()} for scen in loaded])))
        return
    for scen in loaded:
        click.echo(f"{scen.name}\n    {scen.summary}")
        trigger = ", ".join(f"{k}={v}" for k, v in scen.params()["trigger"].items() if v is not None)
        click.echo(f"    parameters: {trigger}")
