"""``chaosckpt run``: one scenario applied once to a training command."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import click

from chaosckpt.conductor import config as configs, scenario as scenarios
from chaosckpt.conductor.errors import EXIT_CODES, UsageError, exit_code
from chaosckpt.conductor.nodes import cluster as clusters
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import document
from chaosckpt.conductor.runs import horizon as horizons, invocation, preflight, progress, sandbox
from chaosckpt.conductor.trial import TrialOptions, render, run_trial


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
@click.option("--timeout", default=None, type=float, metavar="SECONDS",
              help="Per-run limit (default 3600); past it the job's process tree is killed and the trial is inconclusive.")
@click.option("--tolerance", default=None, type=float, metavar="REL",
              help="Relative tolerance for comparing losses and parameters; 0 (default) means bitwise.")
@click.option("--out", default=None, type=click.Path(path_type=Path),
              help="Folder the results go into, one subfolder per invocation (default chaosckpt-results).")
@click.option("--workdir", default=None, type=click.Path(path_type=Path),
              help="The job's working directory, copied into a private sandbox for every run (default: the config file's folder, else .).")
@click.option("--keep-sandbox", is_flag=True, help="Keep the sandbox copies (with the faulted checkpoints) in the results.")
@click.option("--sweep", is_flag=True,
              help="Crash after every operation of the save in turn and report what a restarted job finds for each.")
@click.option("--max-resumes", default=3, show_default=True, type=click.IntRange(0), metavar="N",
              help="With --sweep: run full resumes for at most N distinct disk states (the rest get a load check).")
@click.option("--ckpt-dir", "ckpt_dirs", multiple=True, metavar="DIR",
              help="A checkpoint directory (under --workdir) the power-loss model rewrites, besides those the job saved into.")
@click.option("--map", "maps", multiple=True, type=click.Path(path_type=Path), metavar="DIR",
              help="A folder outside --workdir the job writes into: its writes land in the sandbox through an overlay.")
@click.option("--exclude", "excludes", multiple=True, type=click.Path(path_type=Path), metavar="PATH",
              help="A path under --workdir left out of the sandbox, such as a checkpoint an earlier training left.")
@click.option("--nproc", type=int, default=None, metavar="N",
              help="Run SCRIPT.py as N ranks on this machine, through torch.distributed.run --standalone.")
@click.option("--nnodes", type=int, default=None, metavar="N",
              help="Run the job on N machines: with --nproc, N x nproc ranks through torch.distributed.run, "
                   "each node's rank and the rendezvous at node 0 filled in by chaosckpt (see Multi-node jobs).")
@click.option("--hosts", default=None, metavar="A,B,...",
              help="The nodes' machines, node 0 first (default: the Slurm allocation with --node-cmd, else this machine).")
@click.option("--node-cmd", default=None, metavar="TEMPLATE",
              help="What starts a node on its machine, e.g. 'ssh {host}' or 'srun -N1 -n1 -w {host}' "
                   "(default: a separate process group on this machine).")
@click.option("--listen", default=None, metavar="ADDRESS",
              help="The address the nodes reach chaosckpt at (default: 127.0.0.1 for local nodes, else this host's name).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), metavar="FILE",
              help="chaosckpt.toml or pyproject.toml to read (default: the nearest one from here up), as suite does.")
@click.option("--horizon", "horizon_value", default=None, metavar="N|end",
              help="Steps compared after the resume point: each run stops that far past the point it matters for; "
                   f"'end' runs every run to the job's end (default {horizons.DEFAULT}).")
@click.option("--ignore", "ignored", multiple=True, metavar="KIND",
              help="List findings of this kind as ignored and count none toward the verdict (repeatable), "
                   "e.g. --ignore rng-states-missing.")
@click.option("--json", "as_json", is_flag=True, help="Print only the result document, as JSON, on stdout.")
def command(args, scenario_name, params, resume_args, resume_cmd, timeout, tolerance, out, workdir, keep_sandbox, sweep,
            max_resumes, ckpt_dirs, maps, excludes, nproc, nnodes, hosts, node_cmd, listen, config_path, horizon_value,
            ignored, as_json):
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
    chaosckpt.toml), the job, its resume command, nproc, timeout and tolerance
    come from there: chaosckpt run -s enospc needs nothing else.
    """
    if timeout is not None:
        invocation.check_seconds("--timeout", timeout)
    if tolerance is not None:
        invocation.check_tolerance("--tolerance", tolerance)
    conf = configs.with_command_line(
        config_path, Path.cwd(), command=tuple(args) or None, nproc=nproc, timeout=timeout, tolerance=tolerance,
        results=out, workdir=workdir, resume_args=invocation.split_tuple("--resume-args", resume_args),
        resume_command=invocation.split_tuple("--resume-cmd", resume_cmd), horizon=horizon_value,
        map=tuple(maps) or None, exclude=tuple(excludes) or None, ignore=tuple(ignored) or None)
    workdir = conf.workdir.resolve()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    overrides = dict(scenarios.parse_param(p) for p in params)
    scen = scenarios.load(scenario_name, overrides)
    base = Path(conf.source).parent if conf.source and not args else None
    cluster = clusters.from_options(nnodes, hosts, node_cmd, listen)
    command = clusters.with_nodes(invocation.job_command(list(conf.command), workdir, base), conf.nproc, cluster)
    resume = invocation.resume_command(command, conf.resume_args, conf.resume_command)
    timeout, tolerance, out = conf.timeout, conf.tolerance, conf.results
    invocation.check_sweep(scen, sweep)
    horizon = horizons.parse(conf.horizon, "--horizon")
    exclude = [out, *invocation.excluded(conf.exclude, workdir)]
    mapped = sandbox.maps(workdir, conf.map, out.resolve())
    watched = invocation.ckpt_dirs(ckpt_dirs, workdir)
    results = invocation.results_dir(out, scen.name)
    opts = TrialOptions(command, resume, workdir, results, timeout, tolerance, keep_sandbox, exclude=exclude,
                        ckpt_dirs=watched, sweep=sweep, max_resumes=max_resumes, maps=[Path(m) for m in mapped],
                        horizon=horizon, progress=progress.wanted(as_json), cluster=cluster, ignore=list(conf.ignore))
    if not as_json:
        click.echo(f"chaosckpt: {scen.name} on {shlex.join(command)} (results in {os.path.relpath(results)})", err=True)
        survey = preflight.survey(workdir, [*exclude, results], results / "sandboxes")
        click.echo(f"chaosckpt: {preflight.line(survey, mapped)}", err=True)
    trial = run_trial(scen, opts)
    doc = document([trial])
    atomic.write_text(results / "result.json", json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc))
    else:
        for line in render.text(trial):
            click.echo(line)
    sys.exit(int(exit_code([trial.status])))
