"""``chaosckpt run``: one scenario applied once to a training command."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import click

from chaosckpt.conductor import config as configs, faults, option_table, scenario as scenarios
from chaosckpt.conductor.errors import EXIT_CODES, UsageError, exit_code, keep_going, printable
from chaosckpt.conductor.params import parse_param
from chaosckpt.conductor.nodes import cluster as clusters
from chaosckpt.conductor.results import atomic, history, stored
from chaosckpt.conductor.results.result import document
from chaosckpt.conductor.runs import invocation, preflight, progress

if TYPE_CHECKING:
    from chaosckpt.conductor.trial.options import TrialOptions


def _refuse_unfit(scen: scenarios.Scenario, conf: configs.SuiteConfig, workdir: Path, base: Optional[Path]) -> None:
    """A scenario that needs more machines or ranks than the job has is refused before any run: the trial could
    only end inconclusive, or test another fault than the one it names."""
    cluster = clusters.from_options(conf.nnodes, conf.hosts, conf.node_cmd, conf.listen)
    nodes = cluster.nnodes if cluster else 1
    job = invocation.job_command(list(conf.command), workdir, base)
    unmet = scen.unmet(nodes, invocation.known_ranks(job, conf.nproc, nodes))
    if unmet:
        raise UsageError(unmet)


@click.command("run", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT.py] [-- ARGS...]")
@click.option("-s", "--scenario", "scenario_name", required=True, metavar="NAME|FILE.toml",
              help="Built-in scenario name (see `chaosckpt scenarios`) or a scenario TOML file.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario parameter, e.g. -p save=3 -p fraction=0.25 -p write=5.")
@option_table.click_options("run")
@click.option("--config", "config_path", type=click.Path(path_type=Path), metavar="FILE",
              help="chaosckpt.toml or pyproject.toml to read (default: the nearest one from here up), as suite does.")
@click.option("--fresh-reference", is_flag=True,
              help="Run the uninterrupted run again even when the project's cached one matches the job.")
@click.option("--json", "as_json", is_flag=True, help="Print only the result document, as JSON, on stdout.")
def command(args, scenario_name, params, config_path, fresh_reference, as_json, **given):
    """Run a training job, inject a fault, resume it, and score the recovery.

    \b
    Examples:
      chaosckpt run train.py --scenario kill9-mid-save
      chaosckpt run train.py --scenario kill9-mid-save -- --epochs 6 --lr 0.1
      chaosckpt run --scenario kill9-mid-save --resume-cmd "bash resume.sh" -- bash train.sh
      chaosckpt run train.py --scenario kill9-mid-save --resume-args=--init_from=resume
      chaosckpt run train.py --scenario kill9-mid-save -p save=3 -p fraction=0.9 --json
      chaosckpt run train.py --nproc 2 --scenario rank-epoch-skew
      chaosckpt run --scenario rank-epoch-skew -- torchrun --nproc_per_node 2 train.py

    A SCRIPT ending in .py runs with this Python interpreter; another script in
    the folder runs by its #! line (a .sh without one: with bash); any other
    command given after -- runs as it is. The job runs in a sandbox copy of
    --workdir: your own files, and your checkpoints above all, are never written.

    In a project configured for chaosckpt suite ([tool.chaosckpt] or
    chaosckpt.toml), the job, its resume command and every other setting there
    (nproc, timeout, tolerance, horizon, ignore, ...) come from it: chaosckpt
    run -s enospc needs nothing else. Each finished run is recorded in the
    project's history (chaosckpt history); an interrupted one leaves its
    result.json, inconclusive. The uninterrupted run is cached in .chaosckpt/
    (shared with suites) and reused until the job, the files or environment
    variables it reads, or chaosckpt change; --fresh-reference runs it again.
    """
    from chaosckpt.conductor.trial import Interrupted, render, run_trial  # imports torch: only a trial needs it

    scen, opts = prepare(args, scenario_name, params, config_path, as_json, given)
    opts.cache_reference, opts.fresh_reference = True, fresh_reference
    results = opts.results_dir
    if not as_json:
        click.echo(f"chaosckpt: {scen.name} on {shlex.join(opts.command)} (results in {os.path.relpath(results)})",
                   err=True)
        for said in preflight.lines(opts.workdir, [*opts.exclude, results], results / "sandboxes", opts.maps):
            click.echo(f"chaosckpt: {said}", err=True)
    try:
        trial = run_trial(scen, opts)
    except Interrupted as stopped:  # what ran is kept, as an inconclusive trial, before exiting as the signal asks
        atomic.write_text(results / "result.json", json.dumps(document([stopped.trial]), indent=2) + "\n")
        raise
    doc = document([trial])
    atomic.write_text(results / "result.json", json.dumps(doc, indent=2) + "\n")
    stored_run = stored.load(results)
    keep_going("the history", lambda: history.record(opts.workdir, stored_run.created, results,
                                                     shlex.join(opts.command), stored_run.version, stored_run.trials))
    if as_json:
        click.echo(json.dumps(doc))
    else:
        if trial.runs and trial.runs[0].cached:
            click.echo("chaosckpt: the uninterrupted run came from the project's cache (.chaosckpt/references), "
                       "unchanged since it ran; --fresh-reference runs it again", err=True)
        for line in render.text(trial):
            click.echo(printable(line))
    sys.exit(int(exit_code([trial.status])))


def prepare(args: Tuple[str, ...], scenario_name: str, params: Tuple[str, ...], config_path: Optional[Path],
            as_json: bool, given: Dict[str, Any]) -> Tuple[scenarios.Scenario, TrialOptions]:
    """The scenario and the trial's options the command line asks for (``given``: the options of
    ``option_table.click_options``), on top of the configuration file; the results folder is made."""
    from chaosckpt.conductor.trial.options import from_spec

    conf = configs.with_command_line(config_path, Path.cwd(), command=tuple(args) or None, **option_table.from_cli(given))
    workdir = conf.workdir.resolve()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    scen = scenarios.load(scenario_name, dict(parse_param(p) for p in params))
    faults.check_sweep(scen, bool(given["sweep"]))
    base = Path(conf.source).parent if conf.source and not args else None
    _refuse_unfit(scen, conf, workdir, base)
    spec = option_table.trial_spec(conf, workdir, base, sweep=bool(given["sweep"]))
    results = invocation.results_dir(conf.results, scen.name)
    return scen, from_spec({**spec, "results_dir": str(results)}, progress.wanted(as_json))
