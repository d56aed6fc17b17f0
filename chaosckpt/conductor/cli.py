"""The ``chaosckpt`` command line."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import List, Optional, Sequence

import click

from chaosckpt import __version__
from chaosckpt.conductor import atomic, render, scenario as scenarios
from chaosckpt.conductor.errors import ExitCode, UsageError
from chaosckpt.conductor.result import Trial, document
from chaosckpt.conductor.trial import TrialOptions, run_trial

EXIT_CODES = """\b
Exit codes:
  0  every trial passed
  1  some trial failed: the job is not resilient to the fault
  2  usage error (bad command line, scenario file or parameter)
  3  internal error in chaosckpt (a crash report file is written)
  4  inconclusive: no trial failed, but a verdict could not be established
"""


def exit_code(trials: Sequence[Trial]) -> ExitCode:
    if any(t.status == "failed" for t in trials):
        return ExitCode.FAILED
    if any(t.status == "inconclusive" for t in trials):
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASSED


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="chaosckpt")
def cli() -> None:
    """Break a PyTorch training job the way production does, resume it, and score the recovery."""


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


@cli.command(epilog=EXIT_CODES, context_settings={"ignore_unknown_options": False})
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
def run(args, scenario_name, params, resume_args, resume_cmd, timeout, tolerance, out, workdir, keep_sandbox, as_json):
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
    sys.exit(int(exit_code([trial])))


@cli.command("scenarios")
def list_scenarios():
    """List the built-in scenarios and their parameters."""
    for name in scenarios.builtin_names():
        scen = scenarios.load(name)
        click.echo(f"{name}\n    {scen.summary}")
        trigger = ", ".join(f"{k}={v}" for k, v in scen.params()["trigger"].items() if v is not None)
        click.echo(f"    parameters: {trigger}")


def _crash_report(exc: BaseException) -> Path:
    directory = Path(tempfile.gettempdir())
    path = directory / f"chaosckpt-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    body = (
        f"chaosckpt {__version__} internal error\n"
        f"command: {shlex.join(sys.argv)}\npython: {sys.version}\n\n"
        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    )
    atomic.write_text(path, body)
    return path


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: usage errors in one line, internal errors as a crash report, never a bare traceback."""
    try:
        cli.main(args=argv, prog_name="chaosckpt", standalone_mode=False)
    except UsageError as exc:
        click.echo(f"chaosckpt: error: {exc}", err=True)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click.ClickException as exc:
        hint = f" (see chaosckpt {exc.ctx.info_name} --help)" if getattr(exc, "ctx", None) and exc.ctx.info_name != "chaosckpt" else " (see chaosckpt --help)"
        click.echo(f"chaosckpt: error: {exc.format_message()}{hint}", err=True)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.Abort:
        click.echo("Interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except KeyboardInterrupt:
        click.echo("Interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except SystemExit:
        raise
    except Exception as exc:
        path = _crash_report(exc)
        click.echo(f"chaosckpt: internal error ({type(exc).__name__}: {exc}); crash report: {path}", err=True)
        sys.exit(int(ExitCode.INTERNAL))
