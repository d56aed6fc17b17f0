"""``chaosckpt history``: per scenario, the pass rate, lost steps and first divergent step of past suites."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from chaosckpt.conductor import config as configs
from chaosckpt.conductor.errors import READING_EXIT_CODES
from chaosckpt.conductor.results import history
from chaosckpt.conductor.results.envelope import envelope


def _value(value) -> str:
    return "-" if value is None else str(value)


@click.command("history", epilog=READING_EXIT_CODES)
@click.option("-s", "--scenario", default=None, help="Only this scenario.")
@click.option("--last", default=20, show_default=True, type=click.IntRange(min=1), help="Suites shown per scenario.")
@click.option("--workdir", default=None, type=click.Path(path_type=Path),
              help="The project whose .chaosckpt/history.sqlite is read (default: the configured workdir, else .).")
@click.option("--json", "as_json", is_flag=True, help="Print the trends as one JSON document.")
def command(scenario, last, workdir, as_json):
    """Show how each scenario fared in past suites and runs of this project, oldest first."""
    if workdir is None:
        workdir = configs.load(None, Path.cwd()).workdir
    trends = history.trends(workdir, scenario, last)
    if as_json:
        click.echo(json.dumps(envelope(workdir=str(Path(workdir).resolve()), scenarios=[
            {"scenario": t.scenario, "passed": t.passed, "total": t.total, "suites": [asdict(p) for p in t.points]} for t in trends])))
        return
    if not trends:
        click.echo(f"no suite or run has finished in {workdir} yet" + (f" with scenario {scenario}" if scenario else "")
                   + "; run chaosckpt suite or chaosckpt run")
        return
    for trend in trends:
        rate = 100.0 * trend.passed / trend.total if trend.total else 0.0
        click.echo(f"{trend.scenario}: passed {trend.passed} of {trend.total} trials ({rate:.0f}%) in the last {len(trend.points)} suites and runs")
        click.echo(f"  {'started':<25}  {'passed':>9}  {'most lost steps':>15}  {'first divergent step':>20}")
        for p in trend.points:
            click.echo(f"  {p.started:<25}  {f'{p.passed}/{p.total}':>9}  {_value(p.max_lost_steps):>15}  {_value(p.first_divergent_step):>20}")
