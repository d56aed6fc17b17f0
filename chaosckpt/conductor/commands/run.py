"""``chaosckpt run``: one scenario applied once to a training command."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import List, Sequence

import click

from chaosckpt.conductor import atomic, render, scenario as scenarios
from chaosckpt.conductor.errors import EXIT_CODES, UsageError, exit_code
from chaosckpt.conductor.result import document
from chaosckpt.conductor.trial import TrialOptions, run_trial


def _command(args: Sequence[str], workdir: Path) -> List[str]:
    """The job's command: ``SCRIPT.py [ARGS]`` runs with this Python; anything else runs as given."""
    if not args:
        raise UsageError("give a training script (chaosckpt run train.py ...) or a command after -- (chaosckpt run ... -- bash train.sh)")
    first = args[0]
    if first.endswith(".py"):
        path = Path(first)
        if not path.is_file():
            raise UsageError(f"script {first} does not exist")
        resolved = path.resolve()
        if workdir not in resolved.parents:
            raise UsageError(f"script {first} is outside the working directory {workdir}, which is what gets copied into the sandbox; run from its directory or pass --workdir")
        return [sys.executable, os.path.relpath(resolved, workdir), *args[1:]]
    if os.sep not in first and shutil.which(first) is None:
        raise UsageError(f"command {first!r} not found on PATH")
    if os.sep in first and not Path(first).exists():
        raise UsageError(f"command {first} does not exist")
    return list(args)


def _results_dir(out: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for n in range(1000):
            path = out / (f"{stamp}-{name}" + (f"-{n}" if n else ""))
            try:
                path.mkdir()
                return path.resolve()
            except FileExistsError:
                continue
    except OSError as exc:
        raise UsageError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    raise UsageError(f"cannot find a free results folder name under {out}")


@click.command("run", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT.py] [-- ARGS...]")
@click.option("-s", "--scenario", "scenario_name", required=True, metavar="NAME|FILE.toml",
              help="Built-in scenario name (see `chaosckpt scenarios`) or a scenario TOML file.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario parameter, e.g. -p save=3 -p fraction=0.25 -p write=5.")
@click.option("--resume-args", default=None, metavar="ARGS",
              help="Arguments appended to the command for the resume run, e.g. --resume-args=--init_from=resume.")
@click.option("--resume-cmd", default=None, metavar="CMD",
              help="A different command for the resume run, e.g. --resume-cmd 'bash resume.sh'.")
@click.option("--timeout", default=3600.0, show_default=True, type=float, metavar="SECONDS",
              help="Per-run limit; past it the job's process tree is killed and the trial is inconclusive.")
@click.option("--tolerance", default=0.0, show_default=True, type=float, metavar="REL",
              help="Relative tolerance for comparing losses and parameters; 0 means bitwise.")
@click.option("--out", default="chaosckpt-results", show_default=True, type=click.Path(path_type=Path),
              help="Folder the results go into, one subfolder per invocation.")
@click.option("--workdir", default=".", show_default=True, type=click.Path(path_type=Path),
              help="The job's working directory, copied into a private sandbox for every run.")
@click.option("--keep-sandbox", is_flag=True, help="Keep the sandbox copies (with the faulted checkpoints) in the results.")
@click.option("--json", "as_json", is_flag=True, help="Print only the result document, as JSON, on stdout.")
def command(args, scenario_name, params, resume_args, resume_cmd, timeout, tolerance, out, workdir, keep_sandbox, as_json):
    """Run a training job, inject a fault, resume it, and score the recovery.

    \b
    Examples:
      chaosckpt run train.py --scenario kill9-mid-save
      chaosckpt run train.py --scenario kill9-mid-save -- --epochs 6 --lr 0.1
      chaosckpt run --scenario kill9-mid-save --resume-cmd "bash resume.sh" -- bash train.sh
      chaosckpt run train.py --scenario kill9-mid-save --resume-args=--init_from=resume
      chaosckpt run train.py --scenario kill9-mid-save -p save=3 -p fraction=0.9 --json

    A SCRIPT ending in .py runs with this Python interpreter; any other command
    given after -- runs as it is. The job runs in a sandbox copy of --workdir:
    your own files, and your checkpoints above all, are never written.
    """
    workdir = workdir.resolve()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    overrides = dict(scenarios.parse_param(p) for p in params)
    scen = scenarios.load(scenario_name, overrides)
    command = _command(args, workdir)
    if resume_cmd is not None and resume_args is not None:
        raise UsageError("give --resume-cmd or --resume-args, not both")
    resume = shlex.split(resume_cmd) if resume_cmd is not None else command + shlex.split(resume_args or "")
    if not resume:
        raise UsageError("--resume-cmd is empty")
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g} is invalid: a run needs some time; give seconds > 0")
    if tolerance < 0:
        raise UsageError(f"--tolerance {tolerance:g} is invalid: use 0 for bitwise or a positive relative tolerance")
    results = _results_dir(out, scen.name)
    opts = TrialOptions(command, resume, workdir, results, timeout, tolerance, keep_sandbox)
    if not as_json:
        click.echo(f"chaosckpt: {scen.name} on {shlex.join(command)} (results in {os.path.relpath(results)})", err=True)
    trial = run_trial(scen, opts)
    doc = document([trial])
    atomic.write_text(results / "result.json", json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc))
    else:
        for line in render.text(trial):
            click.echo(line)
    sys.exit(int(exit_code([trial.status])))
