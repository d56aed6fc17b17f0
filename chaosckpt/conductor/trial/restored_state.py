"""What the resume did not restore: the resumed process's training state diffed, part by part, with the
uninterrupted run's at the same step.

The agent records a manifest (``chaosckpt/agent/manifest.py``) at the step after each save and at the first step
after a load: each optimizer's per-parameter state and hyperparameters, each object holding an optimizer (LR
schedulers), each GradScaler, the buffers of the optimized models. At the restore point the two runs must hold the
same state; every part that differs is a finding of its own, named and with its values, whatever API the job
saved and loaded it with. One function per part kind says how it is worded (``PARTS``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog

MAX_SHOWN = 4
"""Differing values shown in a message; the evidence holds them all."""


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if value is None:
        return "none"
    return str(value)


def _named(part: Dict[str, Any]) -> str:
    """``sched (CosineAnnealingLR)``, or the class alone when the script has no name of its own for it."""
    label, cls = str(part.get("label") or ""), str(part.get("class") or "object")
    return cls if label in ("", cls) else f"{label} ({cls})"


def _mapping(value: Any) -> Dict[str, Any]:
    """``value`` if it is a mapping, keyed by strings; else empty (the job can write its events file)."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def _changed(ours: Any, theirs: Any) -> List[Tuple[str, Any, Any]]:
    """(key, resumed value, uninterrupted value) of each entry that differs; public keys first."""
    ours, theirs = _mapping(ours), _mapping(theirs)
    keys = sorted(set(ours) | set(theirs), key=lambda k: (k.startswith("_"), k))
    return [(k, ours.get(k), theirs.get(k)) for k in keys if ours.get(k) != theirs.get(k)]


def _listed(changes: List[Tuple[str, Any, Any]]) -> str:
    shown = [f"{k} {_value(a)}, the uninterrupted run's {_value(b)}" for k, a, b in changes[:MAX_SHOWN]]
    more = len(changes) - MAX_SHOWN
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _optimizer(ours: Dict[str, Any], theirs: Dict[str, Any], step: int) -> Optional[Finding]:
    held, expected, count = ours.get("with_state"), theirs.get("with_state"), theirs.get("params")
    groups = [(i, _changed(a, b)) for i, (a, b) in enumerate(zip(_list(ours.get("groups")), _list(theirs.get("groups"))))]
    groups = [(i, c) for i, c in groups if c]
    if ours.get("digest") == theirs.get("digest") and not groups:
        return None
    said = []
    if held != expected:
        said.append(f"it holds state for {held or 'none'} of its {count} parameters, where the uninterrupted run's "
                    f"holds it for {expected}")
    elif ours.get("digest") != theirs.get("digest"):
        said.append("the state of its parameters differs from the uninterrupted run's")
    for index, changes in groups:
        said.append(f"{'its' if len(_list(ours.get('groups'))) == 1 else f'group {index}:'} {_listed(changes)}")
    return Finding(
        "optimizer-not-restored",
        f"the optimizer {_named(theirs)} was not restored: at step {step} {'; '.join(said)}; save "
        "optimizer.state_dict() in the checkpoint and load it with optimizer.load_state_dict() on resume",
        {"part": _named(theirs), "step": step, "with_state": held, "reference_with_state": expected,
         "groups": [{"group": i, "changed": [list(c) for c in changes]} for i, changes in groups]},
    )


def _values_differ(ours: Dict[str, Any], theirs: Dict[str, Any], step: int, what: str,
                   fix: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The message and evidence for a part known by its ``state_dict``'s values (``what``: an LR scheduler, a
    GradScaler), or None when it was restored."""
    if ours.get("digest") == theirs.get("digest"):
        return None
    changes = _changed(ours.get("values"), theirs.get("values"))
    listed = _listed(changes) if changes else "its state differs from the uninterrupted run's"
    return (f"the {what} {_named(theirs)} was not restored: at step {step} {listed}: {fix}",
            {"part": _named(theirs), "step": step, "changed": [list(c) for c in changes]})


def _scheduler(ours: Dict[str, Any], theirs: Dict[str, Any], step: int) -> Optional[Finding]:
    said = _values_differ(ours, theirs, step, "LR scheduler", "save scheduler.state_dict() in the checkpoint and "
                          "load it with scheduler.load_state_dict() on resume")
    return None if said is None else Finding("scheduler-not-restored", *said)


def _scaler(ours: Dict[str, Any], theirs: Dict[str, Any], step: int) -> Optional[Finding]:
    said = _values_differ(ours, theirs, step, "GradScaler", "save scaler.state_dict() in the checkpoint and load it "
                          "on resume, or the loss scale starts again from its initial value")
    return None if said is None else Finding("scaler-not-restored", *said)


def _buffers(ours: Dict[str, Any], theirs: Dict[str, Any], step: int) -> Optional[Finding]:
    mine, reference = _mapping(ours.get("buffers")), _mapping(theirs.get("buffers"))
    if mine == reference and ours.get("digest") == theirs.get("digest"):
        return None
    names = sorted(k for k in set(mine) | set(reference) if mine.get(k) != reference.get(k))
    shown = ", ".join(names[:MAX_SHOWN]) + (f" and {len(names) - MAX_SHOWN} more" if len(names) > MAX_SHOWN else "")
    return Finding(
        "buffers-not-restored",
        f"the buffers of {_named(theirs)} were not restored: at step {step} "
        f"{shown or 'its buffers'} differ from the uninterrupted run's (batch norm's running statistics, which "
        "no parameter holds); save model.state_dict(), which holds the buffers, not only the parameters",
        {"part": _named(theirs), "step": step, "buffers": names},
    )


PARTS: Dict[str, Callable[[Dict[str, Any], Dict[str, Any], int], Optional[Finding]]] = {
    "optimizer": _optimizer,
    "scheduler": _scheduler,
    "scaler": _scaler,
    "buffers": _buffers,
}
"""Part kind (the first word of a manifest's part name) -> how a difference in it is found and worded."""


def manifest(step: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The manifest a step event carries, its malformed parts left out (the job can write its events file)."""
    state = step.get("state")
    if not isinstance(state, dict):
        return {}
    return {str(k): v for k, v in state.items() if isinstance(v, dict)}


def findings(reference: ProcessLog, resume: ProcessLog, start: int, modes_differ: bool = False) -> List[Finding]:
    """A finding for each part of the training state whose value at the resume's first step differs from the
    uninterrupted run's at global step ``start`` + 1; none when either run recorded no manifest there. The manifest
    is taken after that step's forward: with modules in another mode (``modes_differ``), batch norm did not update
    its statistics in one run, so the buffers are not compared."""
    if not resume.steps or start >= len(reference.steps):
        return []
    ours, theirs = manifest(resume.steps[0]), manifest(reference.steps[start])
    out = []
    for name in theirs:
        kind = name.split(" ")[0]
        diff = PARTS.get(kind)
        if diff is not None and name in ours and not (modes_differ and kind == "buffers"):
            found = diff(ours[name], theirs[name], start + 1)
            if found is not None:
                out.append(found)
    return out
