"""The training state a process holds, one digest per part, taken where a resume can start.

A checkpoint is a message to a process that does not exist yet: whatever it leaves out starts again in the resumed
process. At the step after each save, and at the first step after a load, the agent records a digest of every part
it can reach from the optimizers the loop steps: each optimizer's per-parameter state and its groups'
hyperparameters, every object that holds an optimizer and has a ``state_dict`` (LR schedulers, torch's or any
library's), each GradScaler, and the buffers of the modules that own the optimized parameters (batch norm's running
statistics, which no parameter digest covers). The conductor diffs the resumed process's parts with the
uninterrupted run's at the same step and names each that differs. Nothing here runs at an ordinary step.
"""

from __future__ import annotations

import gc
import math
import sys
import types
import weakref
import zlib
from typing import Any, Dict, Iterable, List, Optional

import torch

from chaosckpt.agent import fingerprint
from chaosckpt.agent.modes import script_name

MAX_BUFFERS = 200
"""Buffers named one by one; a model with more gets one digest for them all, and the diff names no buffer."""
MAX_VALUES = 16
"""Values of a list kept for display (a scheduler's ``_last_lr`` per group); a longer list is kept as a digest."""


def plain(value: Any) -> Any:
    """A plain value to show and compare (numbers, strings, short lists of them); ``None`` when it is not one."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, bool)) for v in value):
        if len(value) <= MAX_VALUES:
            return [plain(v) for v in value]
        return f"{zlib.crc32(repr(list(value)).encode()):08x}"
    return None


def _crc(value: Any, crc: int = 0) -> int:
    """CRC-32 of a plain state value (containers in order, other values by ``repr``)."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            crc = _crc(value[key], zlib.crc32(str(key).encode(), crc))
        return crc
    if isinstance(value, (list, tuple)):
        for item in value:
            crc = _crc(item, crc)
        return crc
    return zlib.crc32(repr(value).encode(), crc)


def _samples(tensors: List[torch.Tensor]) -> List[str]:
    """Per tensor, its shape, dtype and the CRC of a strided sample of its values: taken in one copy to the host,
    so that a large optimizer state is never copied whole."""
    crcs = fingerprint.value_samples(tensors)
    return [f"{c}.{tuple(t.shape)}.{t.dtype}" for c, t in zip(crcs, tensors)]


def _plain(values: Dict[str, Any], skip: Iterable[str] = ()) -> Dict[str, Any]:
    """The entries of ``values`` worth showing, each as a plain value."""
    out = {}
    for key, value in values.items():
        shown = plain(value)
        if key not in skip and (shown is not None or value is None):
            out[str(key)] = shown
    return out


def optimizer_part(opt: torch.optim.Optimizer) -> Dict[str, Any]:
    """An optimizer's per-parameter state (how many parameters hold some, and its digest) and each group's
    hyperparameters."""
    crc, held, count, tensors = 0, 0, 0, []
    for group in opt.param_groups:
        for p in group["params"]:
            count += 1
            state = opt.state.get(p) or {}
            held += bool(state)
            crc = zlib.crc32(b"+" if state else b"-", crc)
            for key in sorted(state, key=str):
                value = state[key]
                crc = zlib.crc32(str(key).encode(), crc)
                if isinstance(value, torch.Tensor):
                    tensors.append(value)
                else:
                    crc = _crc(value, crc)
    crc = zlib.crc32("".join(_samples(tensors)).encode(), crc)
    groups = [_plain(group, skip=("params",)) for group in opt.param_groups]
    return {"class": type(opt).__name__, "params": count, "with_state": held, "digest": f"{crc:08x}",
            "groups": groups}


def holder_part(holder: Any) -> Optional[Dict[str, Any]]:
    """An object that holds an optimizer (an LR scheduler): its ``state_dict``'s plain values and a digest of the
    whole; None when its ``state_dict`` fails."""
    try:
        state = holder.state_dict()
    except Exception:
        return None
    if not isinstance(state, dict):
        return None
    return {"class": type(holder).__name__, "values": _plain(state), "digest": f"{_crc(_plain(state)):08x}"}


def buffers_part(root: torch.nn.Module) -> Dict[str, Any]:
    """The buffers of a model tree, each by its digest (or one digest past ``MAX_BUFFERS``)."""
    named = list(root.named_buffers())
    buffers = dict(zip((name for name, _ in named), _samples([b for _, b in named])))
    if len(buffers) > MAX_BUFFERS:
        return {"class": type(root).__name__, "count": len(buffers), "digest": f"{_crc(buffers):08x}"}
    return {"class": type(root).__name__, "buffers": buffers}


_HOLDERS: Dict[tuple, List[weakref.ref]] = {}
"""The holders last found for an optimizer (its weak reference first), by its id and its reference count then: a
walk of the heap costs tens of milliseconds, and what refers to an optimizer changes rarely (a scheduler made anew
changes the count, or frees the one found before). A few counts are kept: each caller's frames add their own."""
HOLDERS_KEPT = 16


def holders_of(opt: torch.optim.Optimizer) -> List[Any]:
    """Objects whose attributes hold ``opt`` and that save and load a state (LR schedulers, whichever library made
    them), found by what refers to the optimizer, not by their type. Modules (a script's globals, an ``nn.Module``
    whose ``state_dict`` may gather across ranks) and optimizer wrappers are never asked for their state."""
    key = (id(opt), sys.getrefcount(opt))
    known = [ref() for ref in _HOLDERS.get(key, ())]
    if known and known[0] is opt and all(h is not None for h in known):
        return known[1:]
    found = _walk_holders(opt)
    try:
        _HOLDERS[key] = [weakref.ref(h) for h in (opt, *found)]
    except TypeError:  # a holder that takes no weak reference: walked again each time
        return found
    while len(_HOLDERS) > HOLDERS_KEPT:
        del _HOLDERS[next(iter(_HOLDERS))]
    return found


def _walk_holders(opt: torch.optim.Optimizer) -> List[Any]:
    found: List[Any] = []
    for referrer in gc.get_referrers(opt):
        # an instance's attributes are a dict that refers to the optimizer, or, kept inline (CPython 3.11+), the
        # instance itself
        owners = gc.get_referrers(referrer) if isinstance(referrer, dict) else [referrer]
        for owner in owners:
            if (_keeps_state(owner) and _attributes_hold(owner, opt) and all(owner is not f for f in found)):
                found.append(owner)
    return found


def _attributes_hold(owner: Any, opt: torch.optim.Optimizer) -> bool:
    attributes = getattr(owner, "__dict__", None)
    return isinstance(attributes, dict) and any(value is opt for value in attributes.values())


def _keeps_state(owner: Any) -> bool:
    return (callable(getattr(owner, "state_dict", None)) and callable(getattr(owner, "load_state_dict", None))
            and not isinstance(owner, (type, types.ModuleType, torch.nn.Module, torch.optim.Optimizer)))


def take(optimizers: List[torch.optim.Optimizer], roots: List[torch.nn.Module],
         scalers: List[Any]) -> Dict[str, Dict[str, Any]]:
    """The manifest: part name -> what was recorded of it. Names are stable between runs of one job: the
    optimizers by creation order, the rest by the script's name for them or their class."""
    parts: Dict[str, Dict[str, Any]] = {}
    for index, opt in enumerate(optimizers):
        parts[f"optimizer {index}"] = {**optimizer_part(opt), "label": script_name(opt)}
        for k, holder in enumerate(holders_of(opt)):
            part = holder_part(holder)
            if part is not None:
                parts[f"scheduler {index}.{k}"] = {**part, "label": script_name(holder)}
    for root in roots:
        part = buffers_part(root)
        if part.get("buffers") or part.get("count"):
            parts[f"buffers {script_name(root)}"] = {**part, "label": script_name(root)}
    for index, scaler in enumerate(scalers):
        part = holder_part(scaler)
        if part is not None:
            parts[f"scaler {index}"] = {**part, "label": script_name(scaler)}
    return parts


class Scalers:
    """The GradScalers the loop has used, held weakly."""

    def __init__(self) -> None:
        self._refs: List[weakref.ref] = []

    def saw(self, scaler: Any) -> None:
        if all(ref() is not scaler for ref in self._refs):
            self._refs.append(weakref.ref(scaler))

    def live(self) -> List[Any]:
        return [s for s in (ref() for ref in self._refs) if s is not None]
