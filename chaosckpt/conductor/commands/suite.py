"""``chaosckpt suite``: every configured scenario against one job, with one shared reference run and reports."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import click

from chaosckpt.conductor import atomic, cache, config as configs, confinement, history, invocation, scenario as scenarios
from chaosckpt.conductor.commands import report as report_command
from chaosckpt.conductor.errors import EXIT_CODES, ExitCode, UsageError, exit_code
from chaosckpt.conductor.reports import stored
from chaosckpt.conductor.result import document
from chaosckpt.conductor.suite import Finished, Plan, PlannedTrial, Suite, completed_saves, prepare_reference
from chaosckpt.conductor.suite import random_points, scenario_label, trial_ids, trigger_keys


def _scenario_name(name: str, base: Path) -> str:
    """A built-in scenario's name as is; a scenario file's path made absolute (from the config's folder)."""
    if name.endswith(".toml") or (base / name).is_file():
        return str((base / name).resolve())
    return name


def _plan_trials(conf: configs.SuiteConfig, base: Path, params: Dict[str, Any]) -> List[PlannedTrial]:
    entries = conf.scenarios or tuple(configs.ScenarioEntry(n) for n in scenarios.builtin_names())
    planned = []
    for entry in entries:
        name = _scenario_name(entry.scenario, base)
        overrides = {**entry.params, **params}
        scenarios.load(name, overrides)  # every trial's scenario and parameters are checked before anything runs
        label = entry.id or "-".join([scenario_label(name), *(f"{k}={v}" for k, v in overrides.items())])
        planned.append(PlannedTrial(label, name, overrides))
    for trial, ident in zip(planned, trial_ids([t.id for t in planned])):
        trial.id = ident
    return planned


def _job(conf: configs.SuiteConfig, from_cli: bool, workdir: Path) -> Tuple[List[str], List[str]]:
    """The job's command, and the same as ``chaosckpt run`` takes it from inside ``workdir`` (for replay lines)."""
    if not conf.command:
        raise UsageError("no job to run: give a script (chaosckpt suite train.py -- ARGS) or set command in [tool.chaosckpt]")
    base = None if from_cli or conf.source is None else Path(conf.source).parent
    command = invocation.job_command(list(conf.command), workdir, base)
    args = command[1:] if conf.command[0].endswith(".py") else list(conf.command)
    return command, args


def _new_plan(conf: configs.SuiteConfig, from_cli: bool, params: Dict[str, Any]) -> Tuple[Plan, Dict[str, object]]:
    workdir = conf.workdir.resolve()
    if not workdir.is_dir():
        raise UsageError(f"workdir {conf.workdir} is not a directory")
    command, args = _job(conf, from_cli, workdir)
    command = invocation.with_ranks(command, conf.nproc if conf.nproc != 1 else None)
    resume = invocation.resume_command(command, conf.resume_args, conf.resume_command)
    if conf.resume_command is not None:
        resume_option = [f"--resume-cmd={shlex.join(conf.resume_command)}"]
    elif conf.resume_args:
        resume_option = [f"--resume-args={shlex.join(conf.resume_args)}"]
    else:
        resume_option = []
    base = Path(conf.source).parent if conf.source else Path.cwd()
    trials = _plan_trials(conf, base, params)
    results = conf.results.resolve()
    exclude = [str(p) for p in invocation.excluded(conf.exclude, workdir)]
    maps = confinement.maps(workdir, conf.map, results)
    parts = cache.key_parts(command, resume, workdir, [results, *map(Path, exclude)])
    plan = Plan(args=args, command=command, resume_command=resume, resume_option=resume_option, workdir=str(workdir),
                results=str(results), timeout=float(conf.timeout), tolerance=float(conf.tolerance), nproc=conf.nproc,
                seed=conf.seed, trials=trials, reference_key=cache.key(parts), created=time.strftime("%Y-%m-%d %H:%M:%S"),
                maps=maps, exclude=exclude)
    return plan, parts


def _interrupted(results: Path) -> Path:
    """The newest suite under ``results``, which must not have finished."""
    found = sorted(p.parent for p in results.glob("*/suite.json"))
    if not found:
        raise UsageError(f"no suite to resume under {results}; run chaosckpt suite without --resume")
    newest = found[-1]
    if json.loads((newest / "suite.json").read_text()).get("state") == "finished":
        raise UsageError(f"nothing to resume: the newest suite, {newest}, finished; run chaosckpt suite without --resume")
    return newest


class Progress:
    """A progress bar on a terminal; in CI (not a terminal) one plain line per finished trial."""

    def __init__(self, total: int, done: int) -> None:
        self.total = total
        self.count = done
        self.bar = None
        if sys.stderr.isatty():
            self.bar = click.progressbar(length=total, label="chaosckpt suite", show_pos=True, file=sys.stderr)

    def __enter__(self) -> "Progress":
        if self.bar is not None:
            self.bar.__enter__()
            self.bar.update(self.count)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def finished(self, item: Finished) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(1)
        else:
            click.echo(f"[{self.count}/{self.total}] {_line(item)}", err=True)


def _line(item: Finished) -> str:
    if item.trial is None:
        return f"ERROR {item.planned.id}: the trial's worker exited with status {item.returncode} without a verdict (see {item.log})"
    return f"{item.trial['status'].upper()} {item.planned.id}: {item.trial['headline'].split(': ', 1)[-1]}"


@click.command("suite", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT.py] [-- ARGS...]")
@click.option("--config", "config_path", type=click.Path(path_type=Path), metavar="FILE",
              help="chaosckpt.toml or pyproject.toml to read (default: the nearest one from here up).")
@click.option("-s", "--scenario", "scenario_names", multiple=True, metavar="NAME|FILE.toml",
              help="Run these scenarios instead of the configured ones (repeatable; default: all built-in ones).")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Override a parameter of every scenario.")
@click.option("--resume-args", default=None, metavar="ARGS", help="Arguments appended to the command for resume runs.")
@click.option("--resume-cmd", default=None, metavar="CMD", help="A different command for resume runs.")
@click.option("--nproc", type=int, default=None, help="Ranks per run, launched through torch.distributed.run (SCRIPT.py jobs).")
@click.option("--timeout", type=float, default=None, metavar="SECONDS", help="Per-run limit (default 3600).")
@click.option("--tolerance", type=float, default=None, metavar="REL", help="Relative tolerance; 0 (default) is bitwise.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Results folder (default chaosckpt-results).")
@click.option("--workdir", type=click.Path(path_type=Path), default=None, help="The job's working directory (default: the config file's folder, else .).")
@click.option("-j", "--jobs", type=int, default=None, help="Trials run in parallel (default 1).")
@click.option("--trials", type=int, default=None, metavar="N", help="Run N trials of each scenario at seeded random fault points.")
@click.option("--seed", type=int, default=None, help="Seed of the random fault points (default: a new one, printed).")
@click.option("--resume", "resume_suite", is_flag=True, help="Continue the newest interrupted suite; finished trials are kept.")
@click.option("--fresh-reference", is_flag=True, help="Run the reference again even when a cached one matches.")
@click.option("--keep-sandbox", is_flag=True, help="Keep the sandbox copies (with the faulted checkpoints).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="HTML report path (default: in the suite's folder).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None, help="JUnit XML path (default: in the suite's folder).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), default=None, help="Markdown summary path (default: in the suite's folder).")
def command(args, config_path, scenario_names, params, resume_args, resume_cmd, nproc, timeout, tolerance, out, workdir,
            jobs, trials, seed, resume_suite, fresh_reference, keep_sandbox, html_path, junit_path, markdown_path):
    """Run every configured scenario against the job, then write HTML, JUnit and Markdown reports.

    \b
    Examples:
      chaosckpt suite                                    # as [tool.chaosckpt] in pyproject.toml says
      chaosckpt suite train.py -j 2 -- --epochs 3        # all built-in scenarios, two trials at a time
      chaosckpt suite --trials 20 --seed 7               # 20 trials per scenario at random fault points
      chaosckpt suite --resume                           # continue an interrupted suite

    Settings come from built-in defaults, then the configuration file, then
    the command line, each overriding the one before. The reference run is
    cached in .chaosckpt/ and reused until the job, its files or chaosckpt change.
    """
    started = time.monotonic()
    conf = configs.load(config_path, Path.cwd()).merged(
        command=tuple(args) or None,
        resume_args=_split("--resume-args", resume_args),
        resume_command=_split("--resume-cmd", resume_cmd),
        nproc=nproc, timeout=timeout, tolerance=tolerance, results=out, workdir=workdir, jobs=jobs, trials=trials,
        seed=seed, scenarios=tuple(configs.ScenarioEntry(n) for n in scenario_names) or None,
    )
    if resume_args is not None and resume_cmd is None:
        conf = dataclasses.replace(conf, resume_command=None)
    if resume_cmd is not None and resume_args is None:
        conf = dataclasses.replace(conf, resume_args=None)
    if resume_suite:
        suite = _resumed(conf, keep_sandbox)
    else:
        suite = _started(conf, bool(args), dict(scenarios.parse_param(p) for p in params), fresh_reference, keep_sandbox)
    plan = suite.plan
    done = len(plan.trials) - len(suite.pending())
    try:
        with Progress(len(plan.trials), done) as progress:
            finished = suite.run(progress.finished)
    except KeyboardInterrupt:
        left = len(suite.pending())
        click.echo(f"chaosckpt: suite interrupted with {len(plan.trials) - left} of {len(plan.trials)} trials done; "
                   f"continue it with: chaosckpt suite --resume --out {shlex.quote(plan.results)}", err=True)
        raise
    plan.state = "finished"
    suite.save_plan()
    results = stored.load(suite.folder)
    ran = [t.trial for t in results.trials if t.trial is not None]
    atomic.write_text(suite.folder / "result.json", json.dumps(document(ran), indent=2) + "\n")
    reports = [html_path or suite.folder / "report.html", junit_path or suite.folder / "junit.xml",
               markdown_path or suite.folder / "summary.md"]
    report_command.write_reports(results, *reports)
    history.record(Path(plan.workdir), plan.created, suite.folder, shlex.join(plan.command), plan.chaosckpt, results.trials)
    _summary(results, finished, time.monotonic() - started, reports)
    crashed = [f for f in finished if f.trial is None]
    sys.exit(int(ExitCode.INTERNAL if crashed else exit_code(t.status for t in ran)))


def _split(option: str, value: Optional[str]) -> Optional[tuple]:
    split = invocation.split(option, value)
    return tuple(split) if split is not None else None


def _started(conf, from_cli: bool, params: Dict[str, Any], fresh: bool, keep_sandbox: bool) -> Suite:
    plan, parts = _new_plan(conf, from_cli, params)
    folder = invocation.results_dir(Path(plan.results), "suite")
    click.echo(f"chaosckpt: suite of {len(plan.trials)} scenario(s) on {shlex.join(plan.command)} "
               f"(results in {folder})", err=True)
    cached = prepare_reference(folder, plan, parts, fresh)
    click.echo("chaosckpt: reference run " + ("reused from the cache" if cached else "done") +
               f" (key {plan.reference_key[:12]})", err=True)
    if conf.trials:
        seed = conf.seed if conf.seed is not None else random.randrange(2**31)
        saves = completed_saves(folder / "reference")
        drawn = [t for base in plan.trials for t in random_points(base, conf.trials, seed, saves, trigger_keys(base.scenario))]
        plan.trials, plan.seed = drawn, seed
        click.echo(f"chaosckpt: {len(drawn)} trial(s) at random fault points, --seed {seed}", err=True)
    suite = Suite(folder, plan, jobs=conf.jobs, keep_sandbox=keep_sandbox)
    suite.save_plan()
    return suite


def _resumed(conf, keep_sandbox: bool) -> Suite:
    folder = _interrupted(conf.results.resolve())
    suite = Suite.open(folder, jobs=conf.jobs, keep_sandbox=keep_sandbox)
    plan = suite.plan
    parts = cache.key_parts(plan.command, plan.resume_command, Path(plan.workdir), [Path(plan.results)])
    if cache.key(parts) != plan.reference_key:
        raise UsageError(f"the job, its files or its environment changed since suite {folder.name} started, so its "
                         "finished trials no longer describe it; run chaosckpt suite without --resume")
    prepare_reference(folder, plan, parts, fresh=False)
    click.echo(f"chaosckpt: resuming suite {folder}: {len(plan.trials) - len(suite.pending())} of "
               f"{len(plan.trials)} trials already done", err=True)
    return suite


def _summary(results: stored.Results, finished: List[Finished], elapsed: float, reports: List[Path]) -> None:
    crashed = {f.planned.id: f for f in finished if f.trial is None}
    for item in results.trials:
        if item.id in crashed:
            click.echo(_line(crashed[item.id]))
            continue
        click.echo(f"{item.trial.headline}" if item.trial.scenario == item.id else f"{item.id}: {item.trial.headline}")
        if item.trial.status != "passed":
            for finding in item.trial.findings:
                click.echo(f"  - {finding.kind}: {finding.message}")
            click.echo(f"  replay: {item.replay}")
    click.echo(f"chaosckpt: {results.summary()} in {elapsed:.0f} s; reports: {', '.join(os.path.relpath(p) for p in reports)}")
