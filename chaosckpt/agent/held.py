"""What of the training state a checkpoint holds, found by value through whatever the job saved.

When a checkpoint begins, the agent notes what the training state holds (``wanted``): each optimizer's state
tensors, each LR scheduler's and GradScaler's ``state_dict`` values, the trained models' persistent buffers. Every
object saved into the checkpoint is walked (dicts, lists, tuples, modules pickled whole; ``torch.save``,
safetensors and DCP alike) and matched against it by value: a strided sample of each tensor, the plain values of
each mapping. What no object of the checkpoint holds is what a resume from it cannot restore, whatever the keys
are called: the ``checkpoint-lacks-state`` finding lists it, as coverage lists missing lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Set

import torch

from chaosckpt.agent import fingerprint, manifest
from chaosckpt.agent.modes import script_name

MAX_TENSORS = 100_000
"""Tensors sampled per checkpoint at most; past it, the parts still unmatched are not judged."""


@dataclass
class Wanted:
    """One part of the training state, and what a checkpoint holding it must contain."""

    what: str
    """How a message names it: ``the optimizer opt (Adam)``."""
    part: str
    """The part as the restored-state diff names it (``opt (Adam)``), so the two findings can be matched."""
    samples: Set[str] = field(default_factory=set)
    values: Dict[str, Any] = field(default_factory=dict)
    found: bool = False


def _named(obj: Any) -> str:
    label, cls = script_name(obj), type(obj).__name__
    return cls if label == cls else f"{label} ({cls})"


def _samples(tensors: List[torch.Tensor]) -> Set[str]:
    return set(fingerprint.value_samples([t for t in tensors if t.numel() > 1 and t.is_floating_point()]))


def _public(values: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in values.items() if not k.startswith("_")}


def _persistent_buffers(root: torch.nn.Module) -> List[torch.Tensor]:
    """Buffers a ``state_dict`` holds (not those registered ``persistent=False``, which the model makes anew)."""
    return [b for module in root.modules() for name, b in module._buffers.items()
            if b is not None and name not in module._non_persistent_buffers_set]


def wanted(optimizers: List[torch.optim.Optimizer], roots: List[torch.nn.Module], scalers: List[Any]) -> List[Wanted]:
    """The parts of the training state now, each with what holds it."""
    out = []
    for opt in optimizers:
        tensors = [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
        out.append(Wanted(f"the optimizer {_named(opt)}", _named(opt), samples=_samples(tensors)))
        for holder in manifest.holders_of(opt):
            part = manifest.holder_part(holder)
            if part is not None and _public(part["values"]):
                out.append(Wanted(f"the LR scheduler {_named(holder)}", _named(holder), values=_public(part["values"])))
    for root in roots:
        out.append(Wanted(f"the buffers of {_named(root)}", _named(root), samples=_samples(_persistent_buffers(root))))
    for scaler in scalers:
        part = manifest.holder_part(scaler)
        if part is not None:
            out.append(Wanted(f"the GradScaler {_named(scaler)}", _named(scaler), values=_public(part["values"])))
    return [w for w in out if w.samples or w.values]


class Held:
    """What the objects saved into one checkpoint hold of the parts ``wants`` names."""

    def __init__(self, wants: List[Wanted]) -> None:
        self.wants = wants
        self.samples: Set[str] = set()
        self.tensors = 0

    def add(self, obj: Any) -> None:
        """Walk one saved object: its tensors sampled, each of its mappings matched against the values wanted."""
        tensors: List[torch.Tensor] = []
        seen: Set[int] = set()
        stack = [obj]
        while stack:
            value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, torch.Tensor):
                tensors.append(value)
            elif isinstance(value, Mapping):
                self._match(value)
                stack.extend(value.values())
            elif isinstance(value, (list, tuple)):
                stack.extend(value)
            elif isinstance(value, torch.nn.Module):
                stack.extend([*value.parameters(), *_persistent_buffers(value)])
        self.tensors += len(tensors)
        if self.tensors <= MAX_TENSORS:
            self.samples |= _samples(tensors)

    def _match(self, mapping: Mapping) -> None:
        for want in self.wants:
            if want.values and not want.found and all(
                    k in mapping and manifest.plain(mapping[k]) == v for k, v in want.values.items()):
                want.found = True

    def lacking(self) -> List[Wanted]:
        """The parts no object of the checkpoint holds; none when there were too many tensors to tell."""
        if self.tensors > MAX_TENSORS:
            return []
        return [w for w in self.wants if not w.found and not (w.samples and w.samples <= self.samples)]


def finding(lacking: List[Wanted]) -> Dict[str, Any]:
    """The ``checkpoint-lacks-state`` content item for the parts a checkpoint does not hold."""
    names = [w.what for w in lacking]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    return {"kind": "checkpoint-lacks-state", "parts": [w.part for w in lacking],
            "message": f"the checkpoint does not hold {listed}: a resume from it starts "
                       f"{'them' if len(names) > 1 else 'it'} again; save {'their' if len(names) > 1 else 'its'} "
                       "state_dict() in the checkpoint and load it on resume"}
