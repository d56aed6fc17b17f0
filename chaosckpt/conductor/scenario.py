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

from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.results.result import Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PLACEMENT_KEYS = ("save", "step", "after")
"""Which save a fault concerns: its number (negative: counted from the reference's end), the first save
at or after a step, or the first save at or after a wall-clock time into the run."""
OPTIONAL_KEYS = ("node", "file")
"""Trigger keys left out of a scenario's parameters when not given (multi-node jobs; one file of a checkpoint)."""
TRIGGER_KEYS = {
    "kill": (*PLACEMENT_KEYS, "fraction", "write", "node", "file"),
    "enospc": (*PLACEMENT_KEYS, "fraction", "write", "free_bytes", "file"),
    "power-loss": (*PLACEMENT_KEYS, "op", "model", "node"),
    "eval-left-on": PLACEMENT_KEYS,
    "rank-skew": (*PLACEMENT_KEYS, "fraction", "write", "rank", "variant", "offset"),
}
"""The trigger keys each fault kind takes; the others keep their defaults."""
FAULTS = tuple(TRIGGER_KEYS)
MODELS = ("ordered", "strict")
SKEW_VARIANTS = ("kill", "offset", "reset")
"""rank-skew: the kill alone; plus one rank's sampler epoch shifted by ``offset`` on resume; plus every epoch reset."""


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration_s(value: object) -> float | None:
    """Seconds from ``90``, ``90s``, ``45m`` or ``1.5h``; None when ``value`` is none of these."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if value >= 0 else None
    if not isinstance(value, str) or len(value) < 2 or value[-1] not in DURATION_UNITS:
        return None
    try:
        number = float(value[:-1])
    except ValueError:
        return None
    return number * DURATION_UNITS[value[-1]] if number >= 0 else None


@dataclass(frozen=True)
class Trigger:
    """Where the fault fires: save number ``save``, at ``fraction`` of its bytes or before write ``write``;
    for ENOSPC optionally after ``free_bytes`` more bytes; for a power loss after operation ``op`` of the
    save (else just after it returns), under durability ``model``."""

    save: int = 2
    step: int | None = None
    """Instead of ``save``: the first save at or after this step of the reference run."""
    after: int | float | str | None = None
    """Instead of ``save``: the first save at or after this time into the reference run (``90s``, ``45m``, ``2h``)."""
    fraction: float = 0.5
    write: int | None = None
    file: str | None = None
    """The name of one file of the checkpoint that ``fraction`` / ``write`` count in; else they count
    across all the checkpoint's files."""
    free_bytes: int | None = None
    op: int | None = None
    model: str = "ordered"
    rank: int = -1
    """rank-skew: the rank held mid-save (and, for ``offset``, whose epoch is shifted); -1 is the last."""
    variant: str = "kill"
    offset: int = 1
    node: int | None = None
    """A multi-node job: only this node loses power (power-loss) or is killed while the others run on (kill);
    -1 is the last node; None: the whole job."""

    def check(self, where: str) -> None:
        if not _whole(self.save, -10**9) or self.save == 0:
            raise UsageError(f"{where}: trigger.save must be a whole number >= 1 (or negative, -N: the N-th save from "
                             f"the end of the uninterrupted run), got {shown(self.save)}")
        if self.step is not None and not _whole(self.step, 0):
            raise UsageError(f"{where}: trigger.step must be a whole number >= 0 (the first save at or after that "
                             f"step), got {shown(self.step)}")
        if self.after is not None and duration_s(self.after) is None:
            raise UsageError(f"{where}: trigger.after must be a time into the run such as 90s, 45m or 2h, "
                             f"got {shown(self.after)}")
        if self.step is not None and self.after is not None:
            raise UsageError(f"{where}: trigger.step and trigger.after both place the fault; give one of them")
        if not isinstance(self.fraction, (int, float)) or isinstance(self.fraction, bool) or not 0 <= self.fraction < 1:
            raise UsageError(f"{where}: trigger.fraction must be a number in [0, 1), got {shown(self.fraction)}")
        if self.file is not None and (not isinstance(self.file, str) or not self.file or "/" in self.file):
            raise UsageError(f"{where}: trigger.file must be a file name such as optimizer.pt, got {shown(self.file)}")
        for key, least in (("write", 1), ("free_bytes", 0), ("op", 0)):
            value = getattr(self, key)
            if value is not None and not _whole(value, least):
                raise UsageError(f"{where}: trigger.{key} must be a whole number >= {least}, got {shown(value)}")
        if self.model not in MODELS:
            raise UsageError(f"{where}: trigger.model must be one of {', '.join(MODELS)}, got {shown(self.model)}")
        if not _whole(self.rank, -1):
            raise UsageError(f"{where}: trigger.rank must be a rank number, or -1 for the last, got {shown(self.rank)}")
        if self.node is not None and not _whole(self.node, -1):
            raise UsageError(f"{where}: trigger.node must be a node rank, or -1 for the last, got {shown(self.node)}")
        if self.variant not in SKEW_VARIANTS:
            raise UsageError(f"{where}: trigger.variant must be one of {', '.join(SKEW_VARIANTS)}, got {shown(self.variant)}")
        if not _whole(self.offset, -10**6) or self.offset == 0:
            raise UsageError(f"{where}: trigger.offset must be a whole number other than 0, got {shown(self.offset)}")


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
class Needs:
    """What a job must have for the scenario to mean anything: how many machines (``nodes``) and ranks.
    A job short of them is refused by ``run`` and skipped by ``suite`` before anything runs."""

    nodes: int = 1
    ranks: int = 1

    def check(self, where: str) -> None:
        for key in ("nodes", "ranks"):
            if not _whole(getattr(self, key), 1):
                raise UsageError(f"{where}: needs.{key} must be a whole number >= 1, got {shown(getattr(self, key))}")

    def at_least(self, other: "Needs") -> "Needs":
        return Needs(max(self.nodes, other.nodes), max(self.ranks, other.ranks))


FAULT_NEEDS = {"rank-skew": Needs(ranks=2)}
"""What a fault kind needs of any job, whatever its scenario file says: ranks to disagree (the fault
kinds' registry is to own this with the rest of each kind's declaration)."""
NODE_NEEDS = Needs(nodes=2)
"""What a trigger naming one ``node`` needs: a multi-node job."""


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    fault: str
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
                    f"run it with chaosckpt run --nnodes N (see Multi-node jobs in the README)")
        if ranks is not None and ranks < self.needs.ranks:
            return (f"{self.name} needs a job of {self.needs.ranks} or more ranks and this one runs {ranks}; give "
                    f"--nproc N, or start the ranks with a launcher after -- (-- torchrun --nproc_per_node 2 train.py)")
        return None

    def params(self) -> Dict[str, Any]:
        placed = [k for k in PLACEMENT_KEYS[1:] if getattr(self.trigger, k) is not None] or ["save"]
        trigger = {k: getattr(self.trigger, k) for k in TRIGGER_KEYS[self.fault]
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


def _check_given(overrides: Dict[str, Any], origins: Dict[str, str]) -> None:
    """Each override checked alone first, so that a bad value is blamed on the flag or the configuration file that
    gave it (``origins``: key -> where it came from; else ``--param``), not on the scenario file."""
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        cls = Expectation if section == "expect" else Trigger
        if name in {f.name for f in dataclasses.fields(cls)}:
            _build(cls, {name: value}, section or "trigger", origins.get(key, f"--param {key}={shown(value)}"))


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
    if data["fault"] not in FAULTS:
        raise UsageError(f"{where}: unknown fault '{data['fault']}' (known: {', '.join(FAULTS)})")
    trigger = dict(_table(data, "trigger", where))
    expect = dict(_table(data, "expect", where))
    _check_given(overrides or {}, origins or {})
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
    built = _build(Trigger, trigger, "trigger", where, TRIGGER_KEYS[data["fault"]])
    needs = _build(Needs, dict(_table(data, "needs", where)), "needs", where)
    needs = needs.at_least(FAULT_NEEDS.get(data["fault"], Needs()))
    return Scenario(
        name=data["name"],
        summary=str(data.get("summary", "")),
        fault=data["fault"],
        trigger=built,
        expect=_build(Expectation, expect, "expect", where),
        source=where,
        needs=needs.at_least(NODE_NEEDS) if built.node is not None else needs,
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


def parse_param(item: str) -> Tuple[str, Any]:
    """``KEY=VALUE`` from the command line, the value read as a TOML literal (else a string)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--param {shown(item)}: expected KEY=VALUE, e.g. --param save=3")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise UsageError(f"--param {key.strip()}: the value is nested too deeply; give a number or a string") from None
    return key.strip(), value
