"""``chaosckpt suite``: every configured scenario against one job, with one shared reference run and reports."""

from __future__ import annotations

import json
import os
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

from chaosckpt.conductor import config as configs, faults, option_table, scenario as scenarios
from chaosckpt.conductor.commands import report as report_command
from chaosckpt.conductor.errors import EXIT_CODES, ExitCode, UsageError, exit_code, keep_going, printable, shown
from chaosckpt.conductor.params import parse_param
from chaosckpt.conductor.results import atomic, history, stored, timestamps
from chaosckpt.conductor.results.envelope import envelope
from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial, load_plan, scenario_label, trial_ids
from chaosckpt.conductor.results.result import document
from chaosckpt.conductor.runs import cache, invocation, leftovers, locks, logcap, preflight
from chaosckpt.conductor.suite import estimate, executors, flake, keywords, shrink
from chaosckpt.conductor.suite.plan_run import (Finished, Suite, completed_saves, prepare_reference, random_points,
                                              trigger_keys)


def _scenario_name(name: str, base: Path) -> str:
    """A built-in scenario's name as is; a scenario file's path made absolute (from the config's folder)."""
    if name.endswith(".toml") or (base / name).is_file():
        return str((base / name).resolve())
    return name


def _plan_trials(conf: configs.SuiteConfig, base: Path, params: Dict[str, Any],
                 ranks: Optional[int]) -> List[PlannedTrial]:
    """Every configured trial, checked; one whose scenario needs more machines or ranks than the job's (``ranks``:
    None when a launcher of the user's own starts them) is planned as skipped, with the reason."""
    entries = conf.scenarios or default_entries(ranks)
    planned = []
    for entry in entries:
        name = _scenario_name(entry.scenario, base)
        overrides = {**entry.params, **params}
        origins = {k: f"{conf.source or 'the configuration'}: params of {entry.scenario}: {k} = {shown(v)}"
                   for k, v in entry.params.items() if k not in params}
        scen = scenarios.load(name, overrides, origins)  # every trial's scenario and parameters are checked before anything runs
        faults.check_sweep(scen, entry.sweep)
        label = entry.id or "-".join([scenario_label(name), *(f"{k}={v}" for k, v in overrides.items()),
                                      *(["sweep"] if entry.sweep else [])])
        planned.append(PlannedTrial(label, name, overrides, entry.sweep, scen.unmet(1, ranks)))
    for trial, ident in zip(planned, trial_ids([t.id for t in planned])):
        trial.id = ident
    return planned


def default_entries(ranks: Optional[int]) -> Tuple[configs.ScenarioEntry, ...]:
    """A suite's trials when none are configured: every built-in scenario once, and, for a one-process job, a
    sweep of the same save for each fault whose sweep shares that save's faulted run (a kill, a power loss): a
    window between two file operations of a save (an unlink before its rename) that one cut point misses."""
    sweeps = faults.swept_by_default() if ranks == 1 else []
    return (*(configs.ScenarioEntry(n) for n in scenarios.builtin_names()),
            *(configs.ScenarioEntry(n, sweep=True) for n in sweeps))


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
    multi_node = [name for name in option_table.MULTI_NODE if getattr(conf, name) is not None]
    if multi_node:
        raise UsageError(f"{multi_node[0]} is for chaosckpt run: a suite runs its shared reference on this machine; "
                         "run each multi-node trial with chaosckpt run --nnodes")
    job, args = _job(conf, from_cli, workdir)
    ranks = invocation.known_ranks(job, conf.nproc)
    spec = option_table.trial_spec(conf, workdir, None if from_cli or conf.source is None else Path(conf.source).parent)
    command, resume = spec["command"], spec["resume_command"]
    if conf.resume_command is not None:
        resume_option = [f"--resume-cmd={shlex.join(conf.resume_command)}"]
    elif conf.resume_args:
        resume_option = [f"--resume-args={shlex.join(conf.resume_args)}"]
    else:
        resume_option = []
    base = Path(conf.source).parent if conf.source else Path.cwd()
    trials = _plan_trials(conf, base, params, ranks)
    exclude = spec["exclude"][1:]
    parts = cache.key_parts(command, resume, spec["maps"], exclude)
    plan = Plan(args=args, command=command, resume_command=resume, resume_option=resume_option, workdir=str(workdir),
                results=str(conf.results.resolve()), timeout=float(conf.timeout), tolerance=float(conf.tolerance),
                nproc=conf.nproc, seed=conf.seed, trials=trials, reference_key=cache.key(parts), created=timestamps.now(),
                horizon=spec["horizon"], maps=spec["maps"], exclude=exclude, share=conf.share, options=spec,
                flake=conf.flake)
    return plan, parts


def _interrupted(results: Path) -> Path:
    """The newest suite under ``results``, which must not have finished."""
    found = [(p.parent, data) for p in sorted(results.glob("*/suite.json")) for data in [load_plan(p.parent)] if data]
    if not found:
        raise UsageError(f"no suite to resume under {results}; run chaosckpt suite without --resume")
    newest, data = found[-1]
    if data.get("state") == "finished":
        raise UsageError(f"nothing to resume: the newest suite, {newest}, finished; run chaosckpt suite without --resume")
    return newest


class Progress:
    """A progress bar on a terminal, naming the trials running; in CI (not a terminal) each trial's verdict
    line as it finishes, on stdout (stderr under ``--json``), which the closing summary then does not repeat."""

    def __init__(self, total: int, done: int, replay: Callable[[PlannedTrial], str], as_json: bool = False) -> None:
        self.total = total
        self.replay = replay
        self.count = done
        self.as_json = as_json
        self.running: List[str] = []
        self.streamed: List[str] = []
        """The ids of the trials whose verdict line was printed as they finished."""
        self.bar = None
        if sys.stderr.isatty():
            self.bar = click.progressbar(length=total, label="chaosckpt suite", show_pos=True, file=sys.stderr,
                                         item_show_func=lambda running: running)

    def __enter__(self) -> "Progress":
        if self.bar is not None:
            self.bar.__enter__()
            self.bar.update(self.count)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def _now(self) -> Optional[str]:
        return f"running {', '.join(self.running)}" if self.running else None

    def started(self, trial: PlannedTrial) -> None:
        self.running.append(trial.id)
        if self.bar is not None:
            self.bar.update(0, self._now())

    def finished(self, item: Finished) -> None:
        self.count += 1
        if item.planned.id in self.running:
            self.running.remove(item.planned.id)
        if self.bar is not None:
            self.bar.update(1, self._now())
            return
        click.echo(printable(f"[{self.count}/{self.total}] {_line(item)}"), err=self.as_json)
        if not self.as_json:
            self.streamed.append(item.planned.id)
            if item.trial is not None and item.trial["status"] != "passed":
                for finding in item.trial["findings"]:
                    click.echo(printable(f"  - {finding['kind']}: {finding['message']}"))
                click.echo(printable(f"  replay: {self.replay(item.planned)}"))


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
              help="Run these scenarios instead of the configured ones (repeatable; default: all built-in ones, and "
                   "sweeps of the kill's and the power loss's save for a one-process job).")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Override a parameter of every scenario.")
@option_table.click_options("suite")
@click.option("-j", "--jobs", type=int, default=None,
              help="Trials run in parallel (default 1; with --executor slurm, all: the cluster's queue decides).")
@click.option("--trials", type=int, default=None, metavar="N", help="Run N trials of each scenario at seeded random fault points.")
@click.option("--seed", type=int, default=None, help="Seed of the random fault points (default: a new one, printed).")
@click.option("--flake", type=click.IntRange(0), default=None, metavar="N",
              help="Before any trial, run the job N more times without a fault and compare each with the reference "
                   "(steps, losses, saves, exit): a job whose runs differ (a racy save, an unseeded stream) gets every "
                   "trial inconclusive, saying how.")
@click.option("--shrink/--no-shrink", default=None,
              help="For a failed kill or power loss placed by hand or at random, try up to 6 smaller faults (earlier "
                   "saves, earlier points) and print the smallest that fails the same way (default: on).")
@click.option("--share/--no-share", default=None,
              help="Kills, power losses and sweeps of the same save share one journaled faulted run (default); "
                   "--no-share runs each alone.")
@click.option("--executor", type=click.Choice(executors.EXECUTORS), default=None,
              help="Where trials run: local (this machine, default) or slurm (each trial an sbatch job; the suite's "
                   "folder and the project must be on a file system the cluster shares).")
@click.option("--slurm-args", default=None, metavar="ARGS",
              help='More sbatch options for every trial\'s job, after [tool.chaosckpt.slurm]: --slurm-args "-p gpu --gpus 1".')
@click.option("--resume", "resume_suite", is_flag=True, help="Continue the newest interrupted suite; finished trials are kept.")
@click.option("-k", "keyword", default=None, metavar="EXPR",
              help='Only trials whose id or scenario matches EXPR, as pytest\'s -k: -k "enospc and not late".')
@click.option("--lf", "--last-failed", "last_failed", is_flag=True,
              help="Only the trials that failed or were inconclusive in this job's last suite or run, as pytest's --lf "
                   "(all of them when none did).")
@click.option("--ff", "--failed-first", "failed_first", is_flag=True,
              help="Every trial, those that failed or were inconclusive last time first, as pytest's --ff.")
@click.option("--plan", "show_plan", is_flag=True,
              help="List the trials that would run, the runs each needs and an estimate in minutes from the cached "
                   "reference run's length; run nothing.")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True), default=None, metavar="M",
              help="Once the reference has run, leave out the trials (the last first) whose runs would not fit in M "
                   "minutes by that estimate, and say which.")
@click.option("--fresh-reference", is_flag=True, help="Run the reference again even when a cached one matches.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="HTML report path (default: in the suite's folder).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None, help="JUnit XML path (default: in the suite's folder).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), default=None, help="Markdown summary path (default: in the suite's folder).")
@click.option("--json", "as_json", is_flag=True, help="Print only one JSON document on stdout: the verdicts and where the reports are.")
def command(args, config_path, scenario_names, params, jobs, trials, seed, flake, shrink, share, executor, slurm_args, resume_suite,
            keyword, last_failed, failed_first, show_plan, max_minutes, fresh_reference, html_path, junit_path,
            markdown_path, as_json, **given):
    """Run every configured scenario against the job, then write HTML, JUnit and Markdown reports.

    \b
    Examples:
      chaosckpt suite                                    # as [tool.chaosckpt] in pyproject.toml says
      chaosckpt suite train.py -j 2 -- --epochs 3        # every built-in scenario and two sweeps, 2 at a time
      chaosckpt suite --trials 20 --seed 7               # 20 trials per scenario at random fault points
      chaosckpt suite --flake 2                          # first, two more runs without a fault must agree
      chaosckpt suite --resume                           # continue an interrupted suite
      chaosckpt suite -k "enospc and not late"           # only the trials whose id or scenario match
      chaosckpt suite --lf                               # only what failed last time (--ff: that first)
      chaosckpt suite --plan                             # what would run, and about how long it takes
      chaosckpt suite --max-minutes 30                   # leave out what would not fit in 30 minutes
      chaosckpt suite --executor slurm --slurm-args "-p gpu --gpus 1 -t 1:00:00"   # each trial a Slurm job

    Settings come from built-in defaults, then the configuration file, then the command line, each overriding the
    one before. The reference run is cached in .chaosckpt/ and reused until the job, the files or environment
    variables it reads, or chaosckpt change.
    """
    started = time.monotonic()
    conf = configs.with_command_line(
        config_path, Path.cwd(), command=tuple(args) or None, jobs=jobs, trials=trials, seed=seed, flake=flake, shrink=shrink,
        scenarios=tuple(configs.ScenarioEntry(n) for n in scenario_names) or None, share=share, executor=executor,
        **option_table.from_cli(given))
    if keyword is not None:
        keywords.matcher(keyword)  # a malformed expression is refused before anything runs
    rerun = _rerun(resume_suite, last_failed, failed_first, show_plan)
    if show_plan:
        plan, _ = _chosen(conf, bool(args), dict(parse_param(p) for p in params), keyword, rerun)
        jobs = conf.jobs or (len(plan.trials) if conf.executor == "slurm" else 1)
        click.echo("\n".join(estimate.lines(plan, estimate.reference_seconds(plan), jobs)))
        return
    if resume_suite:
        suite, parts = _resumed(conf)
    else:
        suite, parts = _started(conf, bool(args), dict(parse_param(p) for p in params), keyword,
                                _sbatch(conf, slurm_args), rerun)
    plan = suite.plan
    try:
        _reference(suite, parts, fresh_reference and not resume_suite, keyword, resume_suite, rerun,
                   None if resume_suite else max_minutes)
        runnable = [t for t in plan.trials if not t.skipped]
        done = len(runnable) - len(suite.pending())
        if resume_suite:
            click.echo(f"chaosckpt: resuming suite {suite.folder}: {done} of {len(runnable)} trials already done",
                       err=True)
        with Progress(len(runnable), done, plan.replay, as_json) as progress:
            finished = suite.run(progress.finished, progress.started)
            _shrink(suite, finished, conf.shrink)
    except KeyboardInterrupt:
        left = len(suite.pending())
        click.echo(f"chaosckpt: suite interrupted with {len(plan.trials) - left} of {len(plan.trials)} trials done; "
                   f"continue it with: chaosckpt suite --resume --out {shlex.quote(plan.results)}", err=True)
        raise
    reports = [html_path or suite.folder / "report.html", junit_path or suite.folder / "junit.xml",
               markdown_path or suite.folder / "summary.md"]
    sys.exit(_finish(suite, finished, reports, progress.streamed, time.monotonic() - started, as_json))


def _finish(suite: Suite, finished: List[Finished], reports: List[Path], streamed: List[str], elapsed: float,
            as_json: bool) -> int:
    """The suite's results recorded and reported, the verdicts printed; the exit status they make."""
    results = _record(suite, reports)
    ran = [t.trial for t in results.trials if t.trial is not None]
    if as_json:
        click.echo(json.dumps(_document(results, suite, reports)))
    else:
        _summary(results, finished, elapsed, reports, streamed)
    crashed = [f for f in finished if f.trial is None and f.returncode != ExitCode.INCONCLUSIVE]
    full = ["inconclusive" for f in finished if f.trial is None and f.returncode == ExitCode.INCONCLUSIVE]
    return int(ExitCode.INTERNAL if crashed else exit_code([*(t.status for t in ran), *full]))


def _record(suite: Suite, reports: List[Path]) -> stored.Results:
    """The suite's verdicts written down: its ``result.json``, its reports and, once every trial has run, the
    history (a suite resumed with -k that left trials to run is recorded when they have run)."""
    plan = suite.plan
    if not suite.pending():
        plan.state = "finished"
        suite.save_plan()
    results = stored.load(suite.folder)
    ran = [t.trial for t in results.trials if t.trial is not None]
    skipped = [{"id": t.id, "scenario": t.scenario, "reason": t.skipped} for t in results.trials if t.skipped]
    atomic.write_text(suite.folder / "result.json", json.dumps(document(ran, skipped), indent=2) + "\n")
    keep_going("the reports", lambda: report_command.write_reports(results, *reports))
    if plan.state == "finished":
        keep_going("the history", lambda: history.record(Path(plan.workdir), plan.created, suite.folder,
                                                          shlex.join(plan.command), plan.chaosckpt, results.trials))
    return results


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


def _fit(suite: Suite, budget_min: float) -> None:
    """``--max-minutes``: the trials whose runs would not fit, by the reference run's length, skipped and named."""
    plan = suite.plan
    seconds = estimate.reference_seconds(plan, suite.folder / "reference")
    if seconds is None:
        return
    cut = estimate.fit(plan, seconds, suite.jobs, budget_min)
    if cut:
        click.echo(f"chaosckpt: --max-minutes {budget_min:g}: left out {len(cut)} trial(s) that would not fit (runs "
                   f"of about {seconds:.0f} s each): {', '.join(t.id for t in cut)}", err=True)
        suite.save_plan()


def _failed_before(plan: Plan, only: bool) -> List[PlannedTrial]:
    """``--lf`` (``only``): the trials that did not pass in the job's last suite or run recorded in the history,
    or all of them when none failed or none was recorded; ``--ff``: all, those first."""
    last = history.last_time(Path(plan.workdir), shlex.join(plan.command))
    failed = set(last.failed) if last is not None else set()
    again = [t for t in plan.trials if t.id in failed]
    flag = "--lf" if only else "--ff"
    if last is None or not again:
        why = ("no earlier suite or run of this job is in the history" if last is None else
               f"nothing failed in the last one ({last.started})" if not last.failed else
               f"none of the {len(last.failed)} trial(s) that failed in the last one ({last.started}) is planned now")
        click.echo(f"chaosckpt: {flag}: {why}; running every trial", err=True)
        return plan.trials
    click.echo(f"chaosckpt: {flag}: {len(again)} trial(s) failed or were inconclusive in the last suite or run "
               f"({last.started}): {', '.join(t.id for t in again)}" + (" first" if not only else ""), err=True)
    return again if only else again + [t for t in plan.trials if t.id not in failed]


def _sbatch(conf, slurm_args: Optional[str]) -> List[str]:
    """Every trial's ``sbatch`` options: ``[tool.chaosckpt.slurm]``, then ``--slurm-args``."""
    try:
        extra = shlex.split(slurm_args or "")
    except ValueError as exc:
        raise UsageError(f"--slurm-args {shown(slurm_args)} is not a valid command line: {exc}") from None
    if (extra or conf.slurm) and conf.executor != "slurm":
        raise UsageError("--slurm-args and [tool.chaosckpt.slurm] are for --executor slurm; add it, or drop them")
    return executors.sbatch_args(conf.slurm, extra)


def _rerun(resume_suite: bool, last_failed: bool, failed_first: bool, show_plan: bool) -> Optional[str]:
    """``lf`` or ``ff`` (or None) from the flags, which a resumed suite, planned already, takes none of."""
    if resume_suite and (last_failed or failed_first):
        raise UsageError("--resume continues a suite as it was planned; --lf and --ff choose the trials of a new one")
    if resume_suite and show_plan:
        raise UsageError("--plan shows a new suite's trials; --resume continues one already planned")
    if last_failed and failed_first:
        raise UsageError("--lf runs only what failed last time and --ff runs everything with that first: give one")
    return "lf" if last_failed else "ff" if failed_first else None


def _chosen(conf, from_cli: bool, params: Dict[str, Any], keyword: Optional[str],
            rerun: Optional[str]) -> Tuple[Plan, Dict[str, object]]:
    """A new suite's plan, with its trials chosen by ``-k``, ``--lf`` or ``--ff`` (random trials are chosen once
    drawn, after the reference run), and its reference's cache key parts."""
    plan, parts = _new_plan(conf, from_cli, params)
    if keyword is not None and not conf.trials:
        plan.trials = _matching(plan.trials, keyword)  # before the reference runs: a typo costs nothing
    if rerun is not None and not conf.trials:
        plan.trials = _failed_before(plan, rerun == "lf")
    return plan, parts


def _started(conf, from_cli: bool, params: Dict[str, Any], keyword: Optional[str],
             sbatch: List[str], rerun: Optional[str]) -> Tuple[Suite, Dict[str, object]]:
    plan, parts = _chosen(conf, from_cli, params, keyword, rerun)
    plan.executor, plan.sbatch = conf.executor, sbatch
    executors.executor(plan.executor, Path(plan.results), sbatch).check()  # before a suite folder is made
    folder = invocation.results_dir(Path(plan.results), "suite")
    click.echo(f"chaosckpt: suite of {len(plan.trials)} scenario(s) on {shlex.join(plan.command)} "
               f"(results in {folder})", err=True)
    for said in preflight.lines(Path(plan.workdir), [Path(plan.results), *map(Path, plan.exclude)], folder, plan.maps):
        click.echo(f"chaosckpt: {said}", err=True)
    for trial in plan.trials:
        if trial.skipped:
            click.echo(f"chaosckpt: skipping {trial.id}: {trial.skipped}", err=True)
    if conf.trials:
        plan.draw = conf.trials
        plan.seed = conf.seed if conf.seed is not None else random.randrange(2**31)
    suite = Suite(folder, plan, jobs=conf.jobs, keep_sandbox=conf.keep_sandbox)
    suite.save_plan()  # before the reference run, so a suite killed during it can be resumed
    return suite, parts


def _reference(suite: Suite, parts: Dict[str, object], fresh: bool, keyword: Optional[str], resumed: bool,
               rerun: Optional[str] = None, budget_min: Optional[float] = None) -> None:
    """The suite's reference run, then the random fault points drawn from it (once), ``-k``, ``--lf`` and ``--ff``
    on them, and ``-k`` on a resume."""
    plan = suite.plan
    if not suite.pending():
        return  # every trial skipped or done: nothing needs a reference
    click.echo("chaosckpt: reference run: the job once without a fault, which every trial is compared with"
               + (", as a Slurm job" if plan.executor == "slurm" else "") + " ...", err=True)
    cached = prepare_reference(suite.folder, plan, parts, fresh, random=bool(plan.draw))
    click.echo("chaosckpt: reference run " + ("reused from the cache" if cached else "done") +
               f" (key {plan.reference_key[:12]})", err=True)
    if plan.draw:
        saves = completed_saves(suite.folder / "reference")
        plan.trials = [t for base in plan.trials
                       for t in ([base] if base.skipped else
                                 random_points(base, plan.draw, plan.seed, saves, trigger_keys(base.scenario)))]
        plan.draw = 0
        click.echo(f"chaosckpt: {len(plan.trials)} trial(s) at random fault points, --seed {plan.seed}", err=True)
        if keyword is not None:
            plan.trials = _matching(plan.trials, keyword)
        if rerun is not None:
            plan.trials = _failed_before(plan, rerun == "lf")
        suite.save_plan()
    elif keyword is not None and resumed:
        suite.selected = {t.id for t in _matching(suite.pending(), keyword)}
    if budget_min is not None:
        _fit(suite, budget_min)
    if plan.flake:
        _flake_check(suite)


def _flake_check(suite: Suite) -> None:
    """``--flake``: the uninterrupted runs compared with the reference; when one differs, every pending trial is
    inconclusive and none runs."""
    plan = suite.plan
    times = "once more" if plan.flake == 1 else f"{plan.flake} more times"
    click.echo(f"chaosckpt: flake check: the job {times} without a fault, each run compared with the reference ...",
               err=True)
    difference = flake.check(suite.folder, plan, plan.flake)
    if difference is None:
        click.echo(f"chaosckpt: flake check: {plan.flake + 1} uninterrupted runs took the same steps, losses and "
                   "saves", err=True)
        return
    click.echo(printable(f"chaosckpt: flake check: {difference}; every trial is inconclusive"), err=True)
    pending = [t for t in suite.pending() if suite.selected is None or t.id in suite.selected]
    flake.inconclusive(suite.folder, pending, difference)


def _shrink(suite: Suite, finished: List[Finished], wanted: bool) -> None:
    """Each failed trial placed by hand or at random, shrunk (``suite.shrink``) unless ``--no-shrink``: the smallest
    fault that fails the same way, said on stderr and kept for the reports."""
    if not wanted:
        return
    from chaosckpt.conductor.trial import run_trial
    from chaosckpt.conductor.trial.options import from_spec

    def run(candidate: PlannedTrial, out: Path) -> Any:
        out.mkdir(parents=True, exist_ok=True)
        opts = from_spec({**suite.plan.options, "results_dir": str(out), "reference": str(suite.folder / "reference")})
        return run_trial(scenarios.load(candidate.scenario, candidate.params), opts)

    for item in finished:
        trial = stored.trial_from_dict(item.trial) if item.trial else None
        if not shrink.shrinkable(item.planned, trial, suite.plan):
            continue
        click.echo(f"chaosckpt: {item.planned.id} failed: trying smaller faults (at most {shrink.MAX_TRIES}) ...",
                   err=True)
        record = shrink.shrink(suite.folder, suite.plan, item.planned, trial, run)
        said = (f"the smallest fault that fails the same way: {record['replay']}" if record["replay"] else
                f"no smaller fault failed the same way ({len(record['tried'])} tried)")
        click.echo(printable(f"chaosckpt: {item.planned.id}: {said}"), err=True)


def _resumed(conf) -> Tuple[Suite, Dict[str, object]]:
    results = conf.results.resolve()
    leftovers.report(results)
    folder = _interrupted(results)
    try:
        leftovers.claim(folder)
    except locks.Busy as exc:
        raise UsageError(f"suite {folder} is being run by another chaosckpt (pid {exc.pid or 'unknown'}); wait for "
                         "it to finish, or stop it and run chaosckpt suite --resume again") from None
    suite = Suite.open(folder, jobs=conf.jobs, keep_sandbox=conf.keep_sandbox)
    suite.executor.check()
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
        trials=[{"id": t.id, "status": t.status, "replay": t.replay, "result": t.trial.to_dict() if t.trial else None,
                 **({"reason": t.skipped} if t.skipped else {}), **({"smallest": t.smallest} if t.smallest else {})}
                for t in results.trials],
    )


def _summary(results: stored.Results, finished: List[Finished], elapsed: float, reports: List[Path],
             streamed: List[str]) -> None:
    """Each trial's verdict (but those ``streamed`` as they finished), its findings and replay line, then the totals."""
    crashed = {f.planned.id: f for f in finished if f.trial is None}
    for item in results.trials:
        if item.id in streamed:
            continue
        if item.skipped:
            click.echo(f"SKIPPED {item.id}: {item.skipped}")
            continue
        if item.id in crashed:
            click.echo(printable(_line(crashed[item.id])))
            continue
        if item.trial is None:
            click.echo(printable(f"{item.id}: not run yet; chaosckpt suite --resume runs it"))
            continue
        click.echo(printable(item.trial.headline if item.trial.scenario == item.id else f"{item.id}: {item.trial.headline}"))
        if item.trial.status != "passed":
            for finding in item.trial.findings:
                click.echo(printable(f"  - {finding.kind}: {finding.message}"))
            click.echo(printable(f"  replay: {item.replay}"))
            if item.smallest:
                click.echo(printable(f"  smallest that fails the same way: {item.smallest}"))
    click.echo(f"chaosckpt: {results.summary()} in {elapsed:.0f} s of wall time ({results.runs()} runs, "
               f"{results.run_time():.0f} s of run time, as the reports count it); "
               f"reports: {', '.join(os.path.relpath(p) for p in reports)}")
