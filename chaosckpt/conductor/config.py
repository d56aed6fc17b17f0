"""Suite configuration: ``[tool.chaosckpt]`` in ``pyproject.toml`` or the top level of ``chaosckpt.toml``.

Values come from three layers, each overriding the one before: built-in
defaults, the configuration file, the command line. Relative paths in a file
are taken from the file's folder. Unknown keys and wrong types are usage errors
naming the key, so a typo never silently runs the wrong suite.
"""

from __future__ import annotations

import difflib
import math
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.runs import horizon as horizons
from chaosckpt.protocol import FINDING_KINDS

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
    workdir: Path = Path(".")
    scenarios: Tuple[ScenarioEntry, ...] = ()
    tolerance: float = 0.0
    timeout: float = 3600.0
    results: Path = Path("chaosckpt-results")
    jobs: int = 1
    trials: int = 0
    seed: Optional[int] = None
    horizon: Any = horizons.DEFAULT
    """Steps compared after the resume point (see ``horizon``), or ``"end"``."""
    map: Tuple[Path, ...] = ()
    """Folders outside ``workdir`` the job writes into (``--map``), from the file's folder."""
    exclude: Tuple[Path, ...] = ()
    """Paths left out of the sandbox (``--exclude``), relative to ``workdir``."""
    share: bool = True
    """Kills, power losses and sweeps of the same save share one journaled faulted run (``trial.shared``); false
    runs each alone."""
    ignore: Tuple[str, ...] = ()
    """Finding kinds listed as ignored and counted toward no verdict (``--ignore``)."""
    source: Optional[str] = None

    def merged(self, **cli: Any) -> "SuiteConfig":
        """This configuration with every command-line value that was given (not None) on top."""
        given = {k: v for k, v in cli.items() if v is not None}
        for key, value in given.items():
            _CHECKS[key](f"--{key.replace('_', '-')}", value)
        return replace(self, **given)


def _number(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{key} must be a number, got {shown(value)}")


def _positive_number(key: str, value: Any) -> None:
    _number(key, value)
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{key} must be a number of seconds > 0, got {shown(value)}")


def _tolerance(key: str, value: Any) -> None:
    _number(key, value)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{key} must be 0 (bitwise) or a positive relative tolerance, got {shown(value)}")


def _whole(minimum: int) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise UsageError(f"{key} must be a whole number >= {minimum}, got {shown(value)}")

    return check


def _seed(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{key} must be a whole number, got {shown(value)}")


def _horizon(key: str, value: Any) -> None:
    horizons.parse(value, key)


def _argv(key: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{key} must be a string or a list of strings, got {shown(value)}")


def _path(key: str, value: Any) -> None:
    if not isinstance(value, Path):
        raise UsageError(f"{key} must be a path (a string), got {shown(value)}")


def _paths(key: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, Path) for v in value):
        raise UsageError(f"{key} must be a list of paths (strings), got {shown(value)}")


def _flag(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"{key} must be true or false, got {shown(value)}")


def _kinds(key: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{key} must be a list of finding kinds, got {shown(value)}")
    for kind in value:
        if kind not in FINDING_KINDS:
            close = difflib.get_close_matches(kind, FINDING_KINDS, n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else f"known kinds: {', '.join(FINDING_KINDS)}"
            raise UsageError(f"{key}: '{kind}' is not a finding kind; {hint}")


def _entries(key: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, ScenarioEntry) for v in value):
        raise UsageError(f"{key} must be a list of scenarios")


_CHECKS: Dict[str, Callable[[str, Any], None]] = {
    "command": _argv,
    "resume_args": _argv,
    "resume_command": _argv,
    "nproc": _whole(1),
    "workdir": _path,
    "scenarios": _entries,
    "tolerance": _tolerance,
    "timeout": _positive_number,
    "results": _path,
    "jobs": _whole(1),
    "trials": _whole(0),
    "seed": _seed,
    "horizon": _horizon,
    "map": _paths,
    "exclude": _paths,
    "share": _flag,
    "ignore": _kinds,
}
KEYS = tuple(k for k in _CHECKS)
"""The keys a configuration file may hold; ``source`` is chaosckpt's own."""


def _unknown(key: str, known: List[str], prefix: str) -> UsageError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
    return UsageError(f"unknown key '{prefix}{key}'{hint}")


def _as_argv(key: str, value: Any) -> Tuple[str, ...]:
    """A command as a TOML string (split like a shell would) or a list of strings."""
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise UsageError(f"{key} is not a valid command line: {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UsageError(f"{key} must be a string or a list of strings, got {shown(value)}")


def _scenario_entry(item: Any, where: str) -> ScenarioEntry:
    if isinstance(item, str):
        return ScenarioEntry(item)
    if not isinstance(item, dict):
        raise UsageError(f"{where} must be a scenario name or a table {{scenario = ..., params = {{...}}}}, got {shown(item)}")
    known = ["scenario", "params", "id", "sweep"]
    for key in item:
        if key not in known:
            raise _unknown(key, known, f"{where}.")
    if not isinstance(item.get("scenario"), str) or not item["scenario"]:
        raise UsageError(f"{where}.scenario must be a scenario name or file, got {shown(item.get('scenario'))}")
    params = item.get("params", {})
    if not isinstance(params, dict):
        raise UsageError(f"{where}.params must be a table of parameters, e.g. {{save = 3, fraction = 0.9}}")
    ident = item.get("id")
    if ident is not None and (not isinstance(ident, str) or not ident.strip()):
        raise UsageError(f"{where}.id must be a non-empty string, got {shown(ident)}")
    sweep = item.get("sweep", False)
    _flag(f"{where}.sweep", sweep)
    return ScenarioEntry(item["scenario"], dict(params), ident, sweep)


def from_table(table: Dict[str, Any], base: Path, prefix: str) -> SuiteConfig:
    """A configuration from a parsed TOML table; ``prefix`` (``tool.chaosckpt.``) goes before key names in messages."""
    values: Dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if key not in _CHECKS:
            raise _unknown(key, list(KEYS), prefix)
        if key in ("command", "resume_args", "resume_command"):
            value = _as_argv(name, value)
        elif key in ("workdir", "results"):
            if not isinstance(value, str) or not value:
                raise UsageError(f"{name} must be a path (a string), got {shown(value)}")
            value = base / value
        elif key in ("map", "exclude"):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise UsageError(f"{name} must be a list of paths (strings), got {shown(value)}")
            value = tuple(base / v if key == "map" else Path(v) for v in value)
        elif key == "ignore" and isinstance(value, list):
            value = tuple(value)
        elif key == "scenarios":
            if not isinstance(value, list) or not value:
                raise UsageError(f"{name} must be a non-empty list of scenarios")
            value = tuple(_scenario_entry(item, f"{name}[{i}]") for i, item in enumerate(value))
        _CHECKS[key](name, value)
        values[key] = value
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
