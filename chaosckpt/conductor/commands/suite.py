"""``chaosckpt suite``: every configured scenario against one job, with one shared reference run and reports."""

from __future__ import annotations

import json
import os
import random
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

from chaosckpt.conductor import config as configs, scenario as scenarios
from chaosckpt.conductor.commands import report as report_command
from chaosckpt.conductor.errors import EXIT_CODES, ExitCode, UsageError, exit_code, shown
from chaosckpt.conductor.results import atomic, history, stored, timestamps
from chaosckpt.conductor.results.envelope import envelope
from chaosckpt.conductor.results.plan import Plan, PlannedTrial, scenario_label, trial_ids
from chaosckpt.conductor.results.result import document
from chaosckpt.conductor.runs import cache, horizon as horizons, invocation, leftovers, locks, logcap, sandbox
from chaosckpt.conductor.suite import keywords
from chaosckpt.conductor.suite.runner import (Finished, Suite, completed_saves, prepare_reference, random_points,
                                              trigger_keys)


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
        scen = scenarios.load(name, overrides)  # every trial's scenario and parameters are checked before anything runs
        invocation.check_sweep(scen, entry.sweep)
        label = entry.id or "-".join([scenario_label(name), *(f"{k}={v}" for k, v in overrides.items()),
                                      *(["sweep"] if entry.sweep else [])])
        planned.append(PlannedTrial(label, name, overrides, entry.sweep))
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
    maps = sandbox.maps(workdir, conf.map, results)
    parts = cache.key_parts(command, resume, maps, exclude)
    plan = Plan(args=args, command=command, resume_command=resume, resume_option=resume_option, workdir=str(workdir),
                results=str(results), timeout=float(conf.timeout), tolerance=float(conf.tolerance), nproc=conf.nproc,
                seed=conf.seed, trials=trials, reference_key=cache.key(parts), created=timestamps.now(),
                horizon=horizons.parse(conf.horizon, "horizon"), maps=maps, exclude=exclude, share=conf.share,
                ignore=list(conf.ignore))
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
    if item.trial is None and item.returncode == ExitCode.INCONCLUSIVE:  # the worker's disk filled up
        return f"INCONCLUSIVE {item.planned.id}: {logcap.last_line(item.log).removeprefix('chaosckpt: inconclusive: ')}"
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
@click.option("--horizon", "horizon_value", default=None, metavar="N|end",
              help=f"Steps compared after each resume point (default {horizons.DEFAULT}); 'end' runs every run to the job's end.")
@click.option("--share/--no-share", default=None,
              help="Kills, power losses and sweeps of the same save share one journaled faulted run (default); "
                   "--no-share runs each alone.")
@click.option("--ignore", "ignored", multiple=True, metavar="KIND",
              help="List findings of this kind as ignored and count none toward the verdict (repeatable), "
                   "e.g. --ignore rng-states-missing.")
@click.option("--resume", "resume_suite", is_flag=True, help="Continue the newest interrupted suite; finished trials are kept.")
@click.option("-k", "keyword", default=None, metavar="EXPR",
              help='Only trials whose id or scenario matches EXPR, as pytest\'s -k: -k "enospc and not late".')
@click.option("--fresh-reference", is_flag=True, help="Run the reference again even when a cached one matches.")
@click.option("--keep-sandbox", is_flag=True, help="Keep the sandbox copies (with the faulted checkpoints).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="HTML report path (default: in the suite's folder).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None, help="JUnit XML path (default: in the suite's folder).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), default=None, help="Markdown summary path (default: in the suite's folder).")
@click.option("--json", "as_json", is_flag=True, help="Print only one JSON document on stdout: the verdicts and where the reports are.")
def command(args, config_path, scenario_names, params, resume_args, resume_cmd, nproc, timeout, tolerance, out, workdir,
            jobs, trials, seed, horizon_value, share, ignored, resume_suite, keyword, fresh_reference, keep_sandbox, html_path, junit_path, markdown_path, as_json):
    """Run every configured scenario against the job, then write HTML, JUnit and Markdown reports.

    \b
    Examples:
      chaosckpt suite                                    # as [tool.chaosckpt] in pyproject.toml says
      chaosckpt suite train.py -j 2 -- --epochs 3        # all built-in scenarios, two trials at a time
      chaosckpt suite --trials 20 --seed 7               # 20 trials per scenario at random fault points
      chaosckpt suite --resume                           # continue an interrupted suite
      chaosckpt suite -k "enospc and not late"           # only the trials whose id or scenario match

    Settings come from built-in defaults, then the configuration file, then
    the command line, each overriding the one before. The reference run is
    cached in .chaosckpt/ and reused until the job, its files or chaosckpt change.
    """
    started = time.monotonic()
    conf = configs.with_command_line(
        config_path, Path.cwd(),
        command=tuple(args) or None,
        resume_args=invocation.split_tuple("--resume-args", resume_args),
        resume_command=invocation.split_tuple("--resume-cmd", resume_cmd),
        nproc=nproc, timeout=timeout, tolerance=tolerance, results=out, workdir=workdir, jobs=jobs, trials=trials,
        seed=seed, scenarios=tuple(configs.ScenarioEntry(n) for n in scenario_names) or None, horizon=horizon_value,
        share=share, ignore=tuple(ignored) or None,
    )
    if keyword is not None:
        keywords.matcher(keyword)  # a malformed expression is refused before anything runs
    if resume_suite:
        suite, parts = _resumed(conf, keep_sandbox)
    else:
        suite, parts = _started(conf, bool(args), dict(scenarios.parse_param(p) for p in params), keep_sandbox, keyword)
    plan = suite.plan
    try:
        _reference(suite, parts, fresh_reference and not resume_suite, keyword, resume_suite)
        done = len(plan.trials) - len(suite.pending())
        if resume_suite:
            click.echo(f"chaosckpt: resuming suite {suite.folder}: {done} of {len(plan.trials)} trials already done",
                       err=True)
        with Progress(len(plan.trials), done) as progress:
            finished = suite.run(progress.finished)
    except KeyboardInterrupt:
        left = len(suite.pending())
        click.echo(f"chaosckpt: suite interrupted with {len(plan.trials) - left} of {len(plan.trials)} trials done; "
                   f"continue it with: chaosckpt suite --resume --out {shlex.quote(plan.results)}", err=True)
        raise
    if not suite.pending():
        plan.state = "finished"
        suite.save_plan()
    results = stored.load(suite.folder)
    ran = [t.trial for t in results.trials if t.trial is not None]
    atomic.write_text(suite.folder / "result.json", json.dumps(document(ran), indent=2) + "\n")
    reports = [html_path or suite.folder / "report.html", junit_path or suite.folder / "junit.xml",
               markdown_path or suite.folder / "summary.md"]
    _keep_going("the reports", lambda: report_command.write_reports(results, *reports))
    if plan.state == "finished":  # a suite resumed with -k that left trials to run is recorded when they have run
        _keep_going("the history", lambda: history.record(Path(plan.workdir), plan.created, suite.folder,
                                                          shlex.join(plan.command), plan.chaosckpt, results.trials))
    if as_json:
        click.echo(json.dumps(_document(results, suite, reports)))
    else:
        _summary(results, finished, time.monotonic() - started, reports)
    crashed = [f for f in finished if f.trial is None and f.returncode != ExitCode.INCONCLUSIVE]
    full = ["inconclusive" for f in finished if f.trial is None and f.returncode == ExitCode.INCONCLUSIVE]
    sys.exit(int(ExitCode.INTERNAL if crashed else exit_code([*(t.status for t in ran), *full])))


def _keep_going(what: str, write: Callable[[], None]) -> None:
    """Write ``what``; trouble with it is a warning, so the verdicts and the exit code still come out."""
    try:
        write()
    except (OSError, sqlite3.Error) as exc:
        click.echo(f"chaosckpt: warning: could not write {what}: {exc}", err=True)


def _names(trial: PlannedTrial) -> Tuple[str, str]:
    return trial.id, scenario_label(trial.scenario)


def _matching(trials: List[PlannedTrial], keyword: str) -> List[PlannedTrial]:
    """``-k``: the trials whose id or scenario match ``keyword``, their count printed; none is a usage error."""
    select = keywords.matcher(keyword)
    chosen = [t for t in trials if select(_names(t))]
    if not chosen:
        listed = ", ".join(t.id for t in trials[:10]) + (" ..." if len(trials) > 10 else "")
        raise UsageError(f"-k {shown(keyword)} matches none of the {len(trials)} trial(s) to run ({listed}); "
                         "match a part of a trial's id or scenario")
    click.echo(f"chaosckpt: -k {shown(keyword)} selected {len(chosen)} of {len(trials)} trial(s)", err=True)
    return chosen


def _started(conf, from_cli: bool, params: Dict[str, Any], keep_sandbox: bool,
             keyword: Optional[str]) -> Tuple[Suite, Dict[str, object]]:
    plan, parts = _new_plan(conf, from_cli, params)
    if keyword is not None and not conf.trials:
        plan.trials = _matching(plan.trials, keyword)  # before the reference runs: a typo costs nothing
    folder = invocation.results_dir(Path(plan.results), "suite")
    click.echo(f"chaosckpt: suite of {len(plan.trials)} scenario(s) on {shlex.join(plan.command)} "
               f"(results in {folder})", err=True)
    if conf.trials:
        plan.draw = conf.trials
        plan.seed = conf.seed if conf.seed is not None else random.randrange(2**31)
    suite = Suite(folder, plan, jobs=conf.jobs, keep_sandbox=keep_sandbox)
    suite.save_plan()  # before the reference run, so a suite killed during it can be resumed
    return suite, parts


def _reference(suite: Suite, parts: Dict[str, object], fresh: bool, keyword: Optional[str], resumed: bool) -> None:
    """The suite's reference run, then the random fault points drawn from it (once), and ``-k`` on a resume."""
    plan = suite.plan
    cached = prepare_reference(suite.folder, plan, parts, fresh, random=bool(plan.draw))
    click.echo("chaosckpt: reference run " + ("reused from the cache" if cached else "done") +
               f" (key {plan.reference_key[:12]})", err=True)
    if plan.draw:
        saves = completed_saves(suite.folder / "reference")
        plan.trials = [t for base in plan.trials
                       for t in random_points(base, plan.draw, plan.seed, saves, trigger_keys(base.scenario))]
        plan.draw = 0
        click.echo(f"chaosckpt: {len(plan.trials)} trial(s) at random fault points, --seed {plan.seed}", err=True)
        if keyword is not None:
            plan.trials = _matching(plan.trials, keyword)
        suite.save_plan()
    elif keyword is not None and resumed:
        suite.selected = {t.id for t in _matching(suite.pending(), keyword)}


def _resumed(conf, keep_sandbox: bool) -> Tuple[Suite, Dict[str, object]]:
    results = conf.results.resolve()
    leftovers.report(results)
    folder = _interrupted(results)
    try:
        leftovers.claim(folder)
    except locks.Busy as exc:
        raise UsageError(f"suite {folder} is being run by another chaosckpt (pid {exc.pid or 'unknown'}); wait for "
                         "it to finish, or stop it and run chaosckpt suite --resume again") from None
    suite = Suite.open(folder, jobs=conf.jobs, keep_sandbox=keep_sandbox)
    plan = suite.plan
    parts = cache.key_parts(plan.command, plan.resume_command, plan.maps, plan.exclude)
    reference = folder / "reference"
    changed = "the job or its environment changed" if cache.key(parts) != plan.reference_key else None
    if changed is None and (reference / cache.INPUTS).is_file():
        changed = cache.inputs_changed(reference, Path(plan.workdir), [Path(plan.results)], plan.command)
    if changed:
        raise UsageError(f"{changed} since suite {folder.name} started, so its finished trials no longer describe "
                         "the job; run chaosckpt suite without --resume")
    return suite, parts


def _document(results: stored.Results, suite: Suite, reports: List[Path]) -> Dict[str, Any]:
    """``suite --json``: the verdicts, each with its replay line, and the reports' paths."""
    return envelope(
        hostname=suite.plan.hostname, suite=str(suite.folder), created=results.created, seed=suite.plan.seed,
        summary=results.counts(),
        reports={"html": str(reports[0]), "junit": str(reports[1]), "markdown": str(reports[2])},
        trials=[{"id": t.id, "status": t.status, "replay": t.replay, "result": t.trial.to_dict() if t.trial else None}
                for t in results.trials],
    )


def _summary(results: stored.Results, finished: List[Finished], elapsed: float, reports: List[Path]) -> None:
    crashed = {f.planned.id: f for f in finished if f.trial is None}
    for item in results.trials:
        if item.id in crashed:
            click.echo(_line(crashed[item.id]))
            continue
        if item.trial is None:
            click.echo(f"{item.id}: not run yet; chaosckpt suite --resume runs it")
            continue
        click.echo(f"{item.trial.headline}" if item.trial.scenario == item.id else f"{item.id}: {item.trial.headline}")
        if item.trial.status != "passed":
            for finding in item.trial.findings:
                click.echo(f"  - {finding.kind}: {finding.message}")
            click.echo(f"  replay: {item.replay}")
    click.echo(f"chaosckpt: {results.summary()} in {elapsed:.0f} s; reports: {', '.join(os.path.relpath(p) for p in reports)}")
