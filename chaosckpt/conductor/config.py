"""Suite configuration: ``[tool.chaosckpt]`` in ``pyproject.toml`` or the top level of ``chaosckpt.toml``.

Values come from three layers, each overriding the one before: built-in
defaults, the configuration file, the command line. Relative paths in a file
are taken from the file's folder. Unknown keys and wrong types are usage errors
naming the key, so a typo never silently runs the wrong suite.
"""

from __future__ import annotations

import difflib
import functools
import math
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from chaosckpt.conductor import option_table
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.runs import horizon as horizons

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

FILE_NAMES = ("chaosckpt.toml", "pyproject.toml")
"""Looked for in the current folder, then in each parent; the first that configures chaosckpt wins."""


@dataclass(frozen=True)
class ScenarioEntry:
    """One configured trial: a scenario name or file, its parameter overrides, and an optional id."""

    scenario: str
    params: Dict[str, Any] = field(default_factory=dict)
    id: Optional[str] = None
    sweep: bool = False
    """Crash after every operation of the save in turn (``chaosckpt run --sweep``)."""


@dataclass(frozen=True)
class SuiteConfig:
    """Everything a suite needs, after defaults, file and command line are merged."""

    command: Tuple[str, ...] = ()
    resume_args: Optional[Tuple[str, ...]] = None
    resume_command: Optional[Tuple[str, ...]] = None
    nproc: int = 1
    force: bool = False
    """Start more ranks than ``nproc`` allows on this machine (``--force``)."""
    workdir: Path = Path(".")
    scenarios: Tuple[ScenarioEntry, ...] = ()
    tolerance: float = 0.0
    timeout: float = 3600.0
    results: Path = Path("chaosckpt-results")
    jobs: Optional[int] = None
    """Trials at once; None: 1 on this machine, all of them with Slurm (its queue decides)."""
    trials: int = 0
    seed: Optional[int] = None
    flake: int = 0
    """Uninterrupted runs beside the reference before any trial (``suite.flake``)."""
    shrink: bool = True
    """Try smaller faults for a failed trial placed by hand or at random (``suite.shrink``)."""
    horizon: Any = horizons.DEFAULT
    """Steps compared after the resume point (see ``horizon``), or ``"end"``."""
    map: Tuple[Path, ...] = ()
    """Folders outside ``workdir`` the job writes into (``--map``), from the file's folder."""
    exclude: Tuple[Path, ...] = ()
    """Paths left out of the sandbox (``--exclude``), relative to ``workdir``."""
    share: bool = True
    """Kills, power losses and sweeps of the same save share one journaled faulted run (``trial.shared``); false
    runs each alone."""
    keep_sandbox: bool = False
    executor: str = "local"
    """Where trials run: ``local`` or ``slurm`` (``suite.executors``)."""
    slurm: Dict[str, Any] = field(default_factory=dict)
    """``[tool.chaosckpt.slurm]``: the trials' Slurm resources (partition, nodes, gpus, time...) and ``args``."""
    max_resumes: int = 8
    ckpt_dirs: Tuple[str, ...] = ()
    """Checkpoint directories (``--ckpt-dir``), relative to ``workdir``."""
    ignore: Tuple[str, ...] = ()
    """Finding kinds listed as ignored and counted toward no verdict (``--ignore``)."""
    nnodes: Optional[int] = None
    hosts: Optional[str] = None
    node_cmd: Optional[str] = None
    listen: Optional[str] = None
    source: Optional[str] = None

    def merged(self, **cli: Any) -> "SuiteConfig":
        """This configuration with every command-line value that was given (not None) on top."""
        given = {k: v for k, v in cli.items() if v is not None}
        _check({k: _json(v) for k, v in given.items() if k != "scenarios"}, "--", flags=True)
        return replace(self, **given)


_ENTRY: Dict[str, Any] = {
    "if": {"type": "string"},
    "else": {
        "type": "object",
        "x-message": "{where} must be a scenario name or a table {scenario = ..., params = {...}}, got {got}",
        "x-messages": {"required": "{where}.scenario must be a scenario name or file"},
        "required": ["scenario"],
        "properties": {
            "scenario": {"type": "string", "minLength": 1, "x-message": "{where} must be a scenario name or file, got {got}"},
            "params": {"type": "object", "x-message": "{where} must be a table of parameters, e.g. {save = 3, fraction = 0.9}"},
            "id": {"type": "string", "pattern": "\\S", "x-message": "{where} must be a non-empty string, got {got}"},
            "sweep": {**option_table.FLAG, "description": "Crash after every operation of the save in turn (chaosckpt run --sweep)."},
        },
        "additionalProperties": False,
    },
}
SUITE_KEYS: Dict[str, Any] = {
    "scenarios": {"description": "The suite's trials: scenario names or files, or tables {scenario, params, id, sweep}.",
                  "type": "array", "minItems": 1, "items": _ENTRY, "x-message": "{where} must be a non-empty list of scenarios"},
    "jobs": {"description": "Trials run in parallel.", **option_table.whole(1)},
    "trials": {"description": "Trials of each scenario at seeded random fault points.", **option_table.whole(0)},
    "seed": {"description": "Seed of the random fault points.", **option_table.whole()},
    "flake": {"description": "Uninterrupted runs of the job beside the reference, compared with it before any trial.",
              **option_table.whole(0)},
    "shrink": {"description": "Try smaller faults for a failed trial placed by hand or at random.", **option_table.FLAG},
    "share": {"description": "Trials faulting the same save share one faulted run.", **option_table.FLAG},
    "executor": {"description": "Where trials run: on this machine, or each as a Slurm job.", "enum": ["local", "slurm"],
                 "x-message": "{where} must be \"local\" or \"slurm\", got {got}"},
    "slurm": {
        "description": "The Slurm resources of each trial's job (executor = \"slurm\").",
        "type": "object", "x-message": "{where} must be a table such as {partition = \"gpu\", time = \"01:00:00\"}",
        "additionalProperties": False,
        "properties": {
            "partition": {**option_table.TEXT, "description": "sbatch --partition"},
            "nodes": {**option_table.whole(1), "description": "sbatch --nodes"},
            "gpus": {**option_table.whole(0), "description": "sbatch --gpus"},
            "cpus": {**option_table.whole(1), "description": "sbatch --cpus-per-task"},
            "time": {**option_table.TEXT, "description": "sbatch --time, e.g. \"01:00:00\""},
            "mem": {**option_table.TEXT, "description": "sbatch --mem, e.g. \"16G\""},
            "account": {**option_table.TEXT, "description": "sbatch --account"},
            "qos": {**option_table.TEXT, "description": "sbatch --qos"},
            "args": {**option_table.ARGV, "description": "More sbatch options, as written"},
        },
    },
}
SCHEMA = option_table.config_schema(SUITE_KEYS)
"""What a configuration file may hold, as JSON Schema (shipped as ``results/schemas/config.schema.json``)."""
KEYS = tuple(SCHEMA["properties"])
"""The keys a configuration file may hold; ``source`` is chaosckpt's own."""


@functools.lru_cache(maxsize=None)
def _validator() -> Any:
    """The schema's validator, with the ``finite`` keyword (TOML has ``nan`` and ``inf``); jsonschema is imported
    here, when a configuration is read, so that ``chaosckpt --help`` does not pay for it."""
    import jsonschema

    def finite(validator: Any, wanted: bool, instance: Any, schema: Dict[str, Any]) -> Any:
        if wanted and isinstance(instance, float) and not math.isfinite(instance):
            yield jsonschema.ValidationError(f"{instance} is not finite")

    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"finite": finite})
    return cls(SCHEMA)


def _where(path: Sequence[Any], prefix: str, flags: bool) -> str:
    if flags:
        option = option_table.BY_NAME.get(str(path[0]))
        return option.flag if option is not None else f"--{str(path[0]).replace('_', '-')}"
    return prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _message(error: Any, table: Dict[str, Any], prefix: str, flags: bool) -> str:
    """A schema error as one line naming the key: the message its schema gives, else its key's."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema["properties"])
        key = next(k for k in error.instance if k not in known)
        return str(_unknown(key, known, _where(path, prefix, flags) + "." if path else prefix))
    schema, instance = error.schema, error.instance
    if "x-message" not in schema and path:  # deep inside a key whose schema has no message of its own
        schema, instance, path = SCHEMA["properties"][path[0]], table[path[0]], path[:1]
    template = schema.get("x-messages", {}).get(error.validator) or schema["x-message"]
    return template.replace("{where}", _where(path, prefix, flags)).replace("{got}", shown(instance))


def _check(table: Dict[str, Any], prefix: str, flags: bool = False) -> None:
    """Refuse ``table`` unless the schema holds it, with the one-line message of its first error."""
    errors = sorted(_validator().iter_errors(table),
                    key=lambda e: ([str(p) for p in e.absolute_path], e.validator != "type"))
    if errors:
        raise UsageError(_message(errors[0], table, prefix, flags))


def _json(value: Any) -> Any:
    """A command-line value as a configuration file would hold it."""
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def _unknown(key: str, known: List[str], prefix: str) -> UsageError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
    return UsageError(f"unknown key '{prefix}{key}'{hint}")


def _as_argv(key: str, value: Any) -> Tuple[str, ...]:
    """A command as a TOML string (split like a shell would) or a list of strings."""
    if isinstance(value, list):
        return tuple(value)
    try:
        return tuple(shlex.split(value))
    except ValueError as exc:
        raise UsageError(f"{key} is not a valid command line: {exc}") from None


def _value(key: str, value: Any, base: Path, name: str) -> Any:
    """A checked value of the file as ``SuiteConfig`` holds it: commands split, paths from the file's folder
    (``exclude`` and ``ckpt_dirs`` from ``workdir``), scenario entries."""
    if key == "scenarios":
        return tuple(ScenarioEntry(item) if isinstance(item, str) else
                     ScenarioEntry(item["scenario"], dict(item.get("params", {})), item.get("id"), item.get("sweep", False))
                     for item in value)
    schema = option_table.BY_NAME[key].schema if key in option_table.BY_NAME else None
    if schema is option_table.ARGV:
        return _as_argv(name, value)
    if key == "ignore":
        return option_table.finding_kinds(name, value)
    if key in ("exclude", "ckpt_dirs"):
        return tuple(Path(v) if key == "exclude" else v for v in value)
    if schema is option_table.PATHS:
        return tuple(base / v for v in value)
    if schema is option_table.PATH:
        return base / value
    return value


def from_table(table: Dict[str, Any], base: Path, prefix: str) -> SuiteConfig:
    """A configuration from a parsed TOML table; ``prefix`` (``tool.chaosckpt.``) goes before key names in messages."""
    _check(table, prefix)
    values = {key: _value(key, value, base, f"{prefix}{key}") for key, value in table.items()}
    if "resume_args" in values and "resume_command" in values:
        raise UsageError(f"{prefix}resume_args and {prefix}resume_command: give one, not both")
    values.setdefault("workdir", base)
    values.setdefault("results", base / "chaosckpt-results")
    return SuiteConfig(**values)


def _read(path: Path) -> Dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to read; chaosckpt's configuration is one flat table") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def load_file(path: Path) -> SuiteConfig:
    """The configuration in ``path``: a ``chaosckpt.toml``, or a ``pyproject.toml`` with ``[tool.chaosckpt]``."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"configuration file {path} does not exist")
    data = _read(path)
    base = path.resolve().parent
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("chaosckpt")
        if table is None:
            raise UsageError(f"{path} has no [tool.chaosckpt] table")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: tool.chaosckpt must be a table")
        prefix = "tool.chaosckpt."
    else:
        table, prefix = data, ""
    try:
        config = from_table(table, base, prefix)
    except UsageError as exc:
        raise UsageError(f"{path.name}: {exc}") from None
    return replace(config, source=str(path))


def find(start: Path) -> Optional[Path]:
    """The nearest file configuring chaosckpt, from ``start`` up to the filesystem root."""
    for folder in [start.resolve(), *start.resolve().parents]:
        for name in FILE_NAMES:
            path = folder / name
            if not path.is_file():
                continue
            if name == "chaosckpt.toml":
                return path
            tool = _read(path).get("tool", {})
            if isinstance(tool, dict) and "chaosckpt" in tool:
                return path
    return None


def load(explicit: Optional[Path], cwd: Path) -> SuiteConfig:
    """The given file, else the nearest one found from ``cwd``, else the defaults (paths from ``cwd``)."""
    path = explicit if explicit is not None else find(cwd)
    if path is None:
        return SuiteConfig(workdir=cwd.resolve(), results=cwd.resolve() / "chaosckpt-results")
    return load_file(path)


def with_command_line(explicit: Optional[Path], cwd: Path, resume_args: Optional[Tuple[str, ...]],
                      resume_command: Optional[Tuple[str, ...]], **cli: Any) -> SuiteConfig:
    """What ``run`` and ``suite`` use: the configuration file (see ``load``) with the command line on top.

    A resume command given on the command line replaces the file's resume arguments, and the other way round.
    """
    conf = load(explicit, cwd).merged(resume_args=resume_args, resume_command=resume_command, **cli)
    if resume_args is not None and resume_command is None:
        conf = replace(conf, resume_command=None)
    if resume_command is not None and resume_args is None:
        conf = replace(conf, resume_args=None)
    return conf
