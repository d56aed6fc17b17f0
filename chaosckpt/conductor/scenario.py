"""Scenarios are data: TOML files naming a fault, where it fires and what counts as passing.

Built-in scenarios live in the repository's ``scenarios/`` folder (installed as
``chaosckpt.scenarios``); ``--scenario`` also takes the path of a TOML file.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, get_args

from chaosckpt.conductor import faults
from chaosckpt.conductor import params
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults.kind import FaultKind, Needs
from chaosckpt.conductor.faults.trigger import OPTIONAL_KEYS, PLACEMENT_KEYS, Trigger
from chaosckpt.conductor.results.result import Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

@dataclass(frozen=True)
class Expectation:
    """What passes: the recovery outcomes accepted, and whether the trajectory must be reproduced."""

    recovered: Tuple[str, ...] = ("last-good",)
    reproduced: bool = True

    def check(self, where: str) -> None:
        known = get_args(Outcome)
        bad = [o for o in self.recovered if o not in known]
        if bad or not self.recovered:
            raise UsageError(f"{where}: expect.recovered must list outcomes from {', '.join(known)}; got {shown(list(self.recovered))}")
        if not isinstance(self.reproduced, bool):
            raise UsageError(f"{where}: expect.reproduced must be true or false, got {shown(self.reproduced)}")


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    fault: faults.FaultName
    trigger: Trigger
    expect: Expectation
    source: str
    needs: Needs = Needs()
    """The scenario's ``[needs]``, raised to what its fault kind and trigger need."""

    def unmet(self, nodes: int, ranks: Optional[int]) -> Optional[str]:
        """Why this scenario cannot run on a job of ``nodes`` machines and ``ranks`` ranks (None: not known,
        as for a launcher given after --), in one line naming the flag that gives it; None when it can."""
        if nodes < self.needs.nodes:
            return (f"{self.name} needs a job on {self.needs.nodes} or more machines and this one runs on {nodes}; "
                    f"run it with chaosckpt run --nnodes N (see docs/multi-node.md, Multi-node jobs)")
        if ranks is not None and ranks < self.needs.ranks:
            return (f"{self.name} needs a job of {self.needs.ranks} or more ranks and this one runs {ranks}; give "
                    f"--nproc N, or start the ranks with a launcher after -- (-- torchrun --nproc_per_node 2 train.py)")
        return None

    @property
    def kind(self) -> FaultKind:
        """What the fault does, from arming to findings (``faults``)."""
        return faults.kind_of(self.fault, self.trigger)

    def params(self) -> Dict[str, Any]:
        placed = [k for k in PLACEMENT_KEYS[1:] if getattr(self.trigger, k) is not None] or ["save"]
        trigger = {k: getattr(self.trigger, k) for k in self.kind.trigger_keys
                   if (k not in PLACEMENT_KEYS or k in placed) and not (k in OPTIONAL_KEYS and getattr(self.trigger, k) is None)}
        return {"trigger": trigger, "expect": dataclasses.asdict(self.expect)}


def builtin_dir() -> Path:
    return Path(str(resources.files("chaosckpt.scenarios")))


def builtin_names() -> List[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def _table(data: Dict[str, Any], key: str, where: str) -> Dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{where}: [{key}] must be a table")
    return value


def _build(cls, values: Dict[str, Any], section: str, where: str, names: Tuple[str, ...] = ()):
    names = list(names) or [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise UsageError(f"{where}: unknown key '{section}.{unknown[0]}' (known: {', '.join(names)})")
    if "recovered" in values:
        if not isinstance(values["recovered"], list):
            raise UsageError(f"{where}: expect.recovered must be a list of outcomes")
        values = {**values, "recovered": tuple(values["recovered"])}
    obj = cls(**values)
    obj.check(where)
    return obj


def _check_given(overrides: Dict[str, Any], origins: Dict[str, str], scenario: str, kind: FaultKind) -> None:
    """Each override checked alone first, so that an unknown key or a bad value is blamed on the flag or the
    configuration file that gave it (``origins``: key -> where it came from; else ``--param``), not on the scenario
    file, with the key it was probably meant to be."""
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        origin = origins.get(key, f"--param {params.param_text(key, value)}")
        cls = Expectation if section == "expect" else Trigger
        known = [f.name for f in dataclasses.fields(cls)] if cls is Expectation else list(kind.trigger_keys)
        if section in ("", "trigger", "expect") and name not in known:
            others = [k.scenario for k in faults.KINDS.values() if cls is Trigger and name in k.trigger_keys]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = (f" (it is a parameter of {', '.join(others)})" if others
                    else f" (did you mean {close[0]}?)" if close else "")
            raise UsageError(f"{origin}: {scenario} has no {'expectation' if cls is Expectation else 'parameter'} "
                             f"'{name}'{hint}; it takes {', '.join(known)}")
        if name in {f.name for f in dataclasses.fields(cls)}:
            built = _build(cls, {name: value}, section or "trigger", origin)
            if cls is Trigger:
                kind.check(built, origin)


def parse(text: str, where: str, overrides: Dict[str, Any] | None = None,
          origins: Dict[str, str] | None = None) -> Scenario:
    """A scenario from TOML text; ``overrides`` maps ``trigger.save``-style keys to values, ``origins`` says where
    each came from (default: ``--param``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    except RecursionError:
        raise UsageError(f"{where}: nested too deeply to read; a scenario is a few flat tables") from None
    known = {"name", "summary", "fault", "trigger", "expect", "needs"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
    for key in ("name", "fault"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UsageError(f"{where}: '{key}' must be a non-empty string")
    kind = faults.named(data["fault"], where)
    trigger = dict(_table(data, "trigger", where))
    expect = dict(_table(data, "expect", where))
    _check_given(overrides or {}, origins or {}, data["name"], kind)
    placing = [k for k in (overrides or {}) if k.rpartition(".")[2] in PLACEMENT_KEYS]
    if len(placing) > 1:
        raise UsageError(f"--param {placing[0]} and --param {placing[1]} both place the fault; give one of them")
    if placing:
        for key in PLACEMENT_KEYS:
            trigger.pop(key, None)  # an explicit placement replaces the file's
    for key, value in (overrides or {}).items():
        section, _, name = key.rpartition(".")
        section = section or "trigger"
        if section not in ("trigger", "expect"):
            raise UsageError(f"--param {key}: only trigger.* and expect.* keys can be set")
        target = trigger if section == "trigger" else expect
        if section == "trigger" and name == "fraction":
            target.pop("write", None)  # an explicit fraction replaces the file's write index
        target[name] = value
    built = _build(Trigger, trigger, "trigger", where, kind.trigger_keys)
    kind.check(built, where)
    needs = _build(Needs, dict(_table(data, "needs", where)), "needs", where)
    return Scenario(
        name=data["name"],
        summary=str(data.get("summary", "")),
        fault=data["fault"],
        trigger=built,
        expect=_build(Expectation, expect, "expect", where),
        source=where,
        needs=needs.at_least(faults.kind_of(data["fault"], built).needs),
    )


def load(name_or_path: str, overrides: Dict[str, Any] | None = None, origins: Dict[str, str] | None = None) -> Scenario:
    """A built-in scenario by name, or a scenario file by path; ``overrides`` and ``origins`` as ``parse`` takes them."""
    path = Path(name_or_path)
    if name_or_path.endswith(".toml") or path.is_file():
        if not path.is_file():
            raise UsageError(f"scenario file {name_or_path} does not exist")
        where = str(path)
    else:
        path = builtin_dir() / f"{name_or_path}.toml"
        if not path.is_file():
            close = difflib.get_close_matches(name_or_path, builtin_names(), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"unknown scenario '{name_or_path}'{hint} (known: {', '.join(builtin_names())})")
        where = f"scenarios/{path.name}"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read scenario {where}: {exc}") from None
    return parse(text, where, overrides, origins)
