"""The one declaration of a trial's options, and what is derived from it.

Each ``Option`` says once how a setting of the trial is spelt on the command line of ``run`` (and of ``suite``),
as a keyword of ``chaosckpt.run(...)`` and as a key of ``[tool.chaosckpt]``, with its JSON Schema there and its
help. From the table come the click options (``click_options``), the API's keywords (``from_api``), the
configuration's schema (``config_schema``, shipped as ``results/schemas/config.schema.json``) and the worker's
spec (``trial_spec``: the ``TrialOptions`` fields as JSON, the only thing ``trial.options.from_spec`` builds a
trial's options from). Importing this module imports no torch, so ``chaosckpt --help`` starts fast.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import click

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.nodes import cluster as clusters
from chaosckpt.conductor.runs import horizon as horizons, invocation, sandbox

Schema = Dict[str, Any]


def _must(text: str, **extra: Any) -> Schema:
    """A schema's one-line message: ``{where} must be <text>, got {got}``."""
    return {**extra, "x-message": "{where} must be " + text + ", got {got}"}


ARGV = _must("a string or a list of strings", type=["string", "array"], items={"type": "string"})
PATH = _must("a path (a string)", type="string", minLength=1)
PATHS = _must("a list of paths (strings)", type="array", items={"type": "string", "minLength": 1})
FLAG = _must("true or false", type="boolean")
TEXT = _must("a string", type="string", minLength=1)


def whole(minimum: Optional[int] = None) -> Schema:
    if minimum is None:
        return _must("a whole number", type="integer")
    return _must(f"a whole number >= {minimum}", type="integer", minimum=minimum)


def number(text: str, **bounds: Any) -> Schema:
    """A finite number within ``bounds``; a value that is no number at all gets the plainer message."""
    return {"type": "number", "finite": True, **bounds, "x-message": "{where} must be " + text + ", got {got}",
            "x-messages": {"type": "{where} must be a number, got {got}"}}


@dataclass(frozen=True)
class Option:
    """One setting of a trial, and how each way in spells it."""

    name: str
    """Its key in ``[tool.chaosckpt]`` and in the merged settings (``config.SuiteConfig``)."""
    schema: Schema
    """Its value in a configuration file, as JSON Schema, with the one-line messages of a bad value."""
    help: str
    flags: Tuple[str, ...] = ()
    """How ``run`` (and ``suite``) spell it; () for the job's command, given after --."""
    click: Mapping[str, Any] = field(default_factory=dict)
    """More of ``click.option``'s arguments: ``type``, ``multiple``, ``is_flag``, ``metavar``."""
    fields: Tuple[str, ...] = ()
    """The ``TrialOptions`` fields it ends in (see ``trial_spec``)."""
    suite: bool = True
    """``suite`` takes the flag too."""
    api: Optional[str] = None
    """Its keyword in ``chaosckpt.run(...)`` when that differs from ``name``."""
    config: bool = True
    """A configuration file may set it."""
    check: Optional[Callable[[str, Any], Any]] = None
    """A check of a command-line or API value beyond its type, given the flag's spelling and the value; what it
    returns, unless None, replaces the value (``--horizon 5`` is the number 5)."""

    @property
    def keyword(self) -> str:
        return self.api or self.name

    @property
    def flag(self) -> str:
        return self.flags[-1] if self.flags else self.name


OPTIONS: Tuple[Option, ...] = (
    Option("command", ARGV, "The job: SCRIPT.py and its arguments, or a command (given after --).",
           fields=("command", "resume_command"), api="args"),
    Option("resume_args", ARGV, "Arguments appended to the command for the resume run, e.g. --resume-args=--init_from=resume.",
           ("--resume-args",), {"metavar": "ARGS"}, fields=("resume_command",)),
    Option("resume_command", ARGV, "A different command for the resume run, e.g. --resume-cmd 'bash resume.sh'.",
           ("--resume-cmd",), {"metavar": "CMD"}, fields=("resume_command",)),
    Option("nproc", whole(1), "Run SCRIPT.py as N ranks on each machine, through torch.distributed.run; at most "
           f"{invocation.RANKS_PER_CPU} per CPU of this machine for the ranks it starts here, unless --force.",
           ("--nproc",), {"type": int, "metavar": "N"}, fields=("command", "resume_command")),
    Option("force", FLAG, f"Start more ranks on this machine than --nproc allows ({invocation.RANKS_PER_CPU} per CPU).",
           ("--force",), {"is_flag": True, "default": None}, fields=("command", "resume_command")),
    Option("workdir", PATH, "The job's working directory, copied into a private sandbox for every run "
           "(default: the config file's folder, else .).", ("--workdir",), {"type": click.Path(path_type=Path)},
           fields=("workdir",)),
    Option("results", PATH, "Folder the results go into, one subfolder per invocation (default chaosckpt-results).",
           ("--out",), {"type": click.Path(path_type=Path)}, fields=("results_dir", "exclude"), api="out"),
    Option("timeout", number("a number of seconds > 0", exclusiveMinimum=0),
           "Per-run limit (default 3600); past it the job's process tree is killed and the trial is inconclusive.",
           ("--timeout",), {"type": float, "metavar": "SECONDS"}, fields=("timeout_s",),
           check=invocation.check_seconds),
    Option("tolerance", number("0 (bitwise) or a positive relative tolerance", minimum=0),
           "Relative tolerance for comparing losses and parameters; 0 (default) means bitwise.",
           ("--tolerance",), {"type": float, "metavar": "REL"}, fields=("tolerance",), check=invocation.check_tolerance),
    Option("horizon", {"anyOf": [{"type": "integer", "minimum": 1}, {"const": horizons.END}],
                       "x-message": "{where} {got} is invalid: give the number of steps compared after the resume "
                                    f"point (a whole number >= 1), or '{horizons.END}' to run every run to the job's end"},
           "Steps compared after the resume point: each run stops that far past the point it matters for; "
           f"'end' runs every run to the job's end (default {horizons.DEFAULT}).",
           ("--horizon",), {"metavar": "N|end"}, fields=("horizon",), check=lambda flag, v: horizons.parse(v, flag)),
    Option("map", PATHS, "A folder outside --workdir the job writes into: its writes land in the sandbox through an overlay.",
           ("--map",), {"multiple": True, "type": click.Path(path_type=Path), "metavar": "DIR"}, fields=("maps",),
           api="maps"),
    Option("exclude", PATHS, "A path under --workdir left out of the sandbox, such as a checkpoint an earlier training left.",
           ("--exclude",), {"multiple": True, "type": click.Path(path_type=Path), "metavar": "PATH"}, fields=("exclude",)),
    Option("ckpt_dirs", PATHS, "A checkpoint directory (under --workdir) the power-loss model rewrites, besides "
           "those the job saved into.", ("--ckpt-dir",), {"multiple": True, "metavar": "DIR"}, fields=("ckpt_dirs",)),
    Option("keep_sandbox", FLAG, "Keep the sandbox copies (with the faulted checkpoints) in the results.",
           ("--keep-sandbox",), {"is_flag": True, "default": None}, fields=("keep_sandbox",)),
    Option("max_resumes", whole(0), "With --sweep: run full resumes for at most N classes of crash state (states a "
           "restarted job cannot tell apart; default 8); a class left untried makes a passing sweep inconclusive.", ("--max-resumes",), {"type": click.IntRange(0), "metavar": "N"},
           fields=("max_resumes",)),
    Option("ignore", _must("a list of finding kinds", type="array", items={"type": "string"}),
           "List findings of this kind as ignored and count none toward the verdict (repeatable), "
           "e.g. --ignore rng-states-missing.", ("--ignore",), {"multiple": True, "metavar": "KIND"},
           fields=("ignore",), check=lambda flag, kinds: finding_kinds(flag, kinds)),
    Option("sweep", FLAG, "Crash after every operation of the save in turn and report what a restarted job finds for "
           "each (in a suite: sweep = true in a scenarios entry).", ("--sweep",), {"is_flag": True, "default": None},
           fields=("sweep",), suite=False, config=False),
    Option("nnodes", whole(1), "Run the job on N machines: with --nproc, N x nproc ranks through "
           "torch.distributed.run, each node's rank and the rendezvous at node 0 filled in by chaosckpt "
           "(see Multi-node jobs).", ("--nnodes",), {"type": int, "metavar": "N"}, fields=("cluster", "command"),
           suite=False),
    Option("hosts", TEXT, "The nodes' machines, node 0 first (default: the Slurm allocation with --node-cmd, else "
           "this machine).", ("--hosts",), {"metavar": "A,B,..."}, fields=("cluster",), suite=False),
    Option("node_cmd", TEXT, "What starts a node on its machine, e.g. 'ssh {host}' or 'srun -N1 -n1 -w {host}' "
           "(default: a separate process group on this machine).", ("--node-cmd",), {"metavar": "TEMPLATE"},
           fields=("cluster",), suite=False),
    Option("listen", TEXT, "The address the nodes reach chaosckpt at (default: 127.0.0.1 for local nodes, else this "
           "host's name).", ("--listen",), {"metavar": "ADDRESS"}, fields=("cluster",), suite=False),
)
BY_NAME = {o.name: o for o in OPTIONS}


def finding_kinds(where: str, kinds: Any) -> Tuple[str, ...]:
    """``kinds`` if every one is a finding kind; else a usage error naming the close matches."""
    for kind in kinds:
        if kind not in protocol.FINDING_KINDS:
            close = difflib.get_close_matches(kind, protocol.FINDING_KINDS, n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else f"known kinds: {', '.join(protocol.FINDING_KINDS)}"
            raise UsageError(f"{where}: '{kind}' is not a finding kind; {hint}")
    return tuple(kinds)
MULTI_NODE = ("nnodes", "hosts", "node_cmd", "listen")
"""The options of a multi-node job; a suite runs its shared reference on this machine, so it refuses them."""


def click_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click options of ``command`` (``run`` or ``suite``), in the table's order; each is passed to the
    command's function under its option's name, None when not given."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(OPTIONS):
            if option.flags and (command == "run" or option.suite):
                function = click.option(*option.flags, option.name, help=option.help, **option.click)(function)
        return function

    return decorate


def _argv(flag: str, value: Any) -> Optional[Tuple[str, ...]]:
    if value is None or isinstance(value, (list, tuple)):
        return None if value is None else tuple(str(v) for v in value)
    return invocation.split_tuple(flag, str(value))


def _given(option: Option, flag: str, value: Any) -> Any:
    """A command-line or API value as the merged settings hold it; None (and an empty list) for not given."""
    if value is None or (isinstance(value, (list, tuple)) and not value and option.name != "command"):
        return None
    try:
        checked = option.check(flag, value) if option.check is not None else None
    except TypeError:  # a keyword of chaosckpt.run given a string where a number goes
        raise UsageError(f"{flag} must be a number, got {shown(value)}") from None
    value = value if checked is None else checked
    if option.schema is ARGV:
        return _argv(flag, value)
    if option.schema is PATH:
        return Path(value)
    if option.schema is PATHS:
        return tuple(Path(v) if option.name != "ckpt_dirs" else str(v) for v in value)
    return value


def from_cli(values: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings given on a command line (click's values by option name), checked, the rest None; those
    no configuration holds (``--sweep``) are the caller's."""
    return {name: _given(BY_NAME[name], BY_NAME[name].flag, value) for name, value in values.items()
            if BY_NAME[name].config}


def from_api(keywords: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings given as keywords of ``chaosckpt.run``; an unknown keyword is a usage error. Those no
    configuration holds (``sweep``) are the caller's."""
    by_keyword = {o.keyword: o for o in OPTIONS}
    values = {}
    for keyword, value in keywords.items():
        option = by_keyword.get(keyword)
        if option is None:
            raise UsageError(f"chaosckpt.run() got an unknown keyword '{keyword}' (known: {', '.join(by_keyword)})")
        if option.config:
            values[option.name] = _given(option, keyword, value)
    return values


def trial_spec(conf: Any, workdir: Path, base: Optional[Path], **more: Any) -> Dict[str, Any]:
    """The ``TrialOptions`` fields that settings ``conf`` (a ``config.SuiteConfig``) give, as JSON: the job's
    commands (``base``: the folder a script in the command is taken from), the sandbox's paths, the cluster;
    ``more`` adds the fields only the caller knows (``results_dir``, ``sweep``, ``reference``, ``prefix``)."""
    cluster = clusters.from_options(conf.nnodes, conf.hosts, conf.node_cmd, conf.listen)
    here = 1 if cluster is None else cluster.nnodes if cluster.node_cmd is None else 0
    invocation.check_ranks((conf.nproc or 1) * here, bool(conf.force))
    command = clusters.with_nodes(invocation.job_command(list(conf.command), workdir, base), conf.nproc, cluster)
    results = conf.results.resolve()
    spec = {
        "command": command,
        "resume_command": invocation.resume_command(command, conf.resume_args, conf.resume_command),
        "workdir": str(workdir),
        "timeout_s": float(conf.timeout), "tolerance": float(conf.tolerance),
        "keep_sandbox": conf.keep_sandbox, "max_resumes": conf.max_resumes,
        "exclude": [str(p) for p in [results, *invocation.excluded(conf.exclude, workdir)]],
        "maps": sandbox.maps(workdir, conf.map, results),
        "ckpt_dirs": invocation.ckpt_dirs(conf.ckpt_dirs, workdir),
        "horizon": horizons.parse(conf.horizon, "horizon"),
        "cluster": None if cluster is None else vars(cluster),
        "ignore": list(conf.ignore),
    }
    return {**spec, **{k: str(v) if isinstance(v, Path) else v for k, v in more.items()}}


def config_schema(suite_keys: Mapping[str, Schema]) -> Schema:
    """The JSON Schema of a configuration table: every option a file may set, then ``suite_keys``."""
    properties = {o.name: {"description": o.help, **o.schema} for o in OPTIONS if o.config}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "chaosckpt configuration ([tool.chaosckpt] in pyproject.toml, or chaosckpt.toml)",
        "type": "object",
        "properties": {**properties, **suite_keys},
        "additionalProperties": False,
    }

