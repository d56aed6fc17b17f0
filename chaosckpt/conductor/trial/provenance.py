"""Which weights a resume that started from a state no run recorded took: its first parameters, sampled by the
agent, against every tensor set in the checkpoints it loaded (the model's state_dict, an EMA copy, a half-precision
copy, the model before its last update).

The agent samples each set as the resume loaded it, before the resumed run's own saves overwrite the files, and
each parameter at the first step after the load, the same way (float32 values of a fixed sample), so a copy in
another floating dtype matches the parameters it was loaded into.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, List, NamedTuple, Optional

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog

MODEL_KEYS = ("model", "model_state_dict", "model_state", "state_dict", "net", "network", "module", "")
"""Keys under which a checkpoint holds the model's own weights, most telling first ("": a bare state_dict)."""
AVERAGE_WORDS = ("ema", "shadow", "averag", "swa", "polyak")
"""Words in a key that hold an average of the weights: its tensors go into the averaging module, not the model."""
HALF = ("float16", "bfloat16")
SETS_NAMED = 6


class TensorSet(NamedTuple):
    """One mapping of tensors in a loaded file, and how many of the resume's parameters its samples hold."""

    path: str
    key: str
    dtype: str
    names: tuple
    matched: int


def _shown(key: str) -> str:
    return f"'{key}'" if key else "the file's top level"


def _place(s: TensorSet) -> str:
    """Where a set is: "under 'ema' in ckpt/last.pt", or "at the top level of ckpt/model.pt"."""
    return f"under '{s.key}' in {s.path}" if s.key else f"at the top level of {s.path}"


def _matched(samples: List[str], held: dict) -> int:
    """How many of the parameters' samples the set holds (each of its tensors counted once)."""
    left = Counter(held.values())
    count = 0
    for sample in samples:
        if left[sample]:
            left[sample] -= 1
            count += 1
    return count


def _first_samples(resumed: ProcessLog) -> Optional[List[str]]:
    """The samples of the parameters the resumed process's first step started from, when the agent took them."""
    return resumed.steps[0].get("samples") if resumed.steps else None


def candidates(resumed: ProcessLog, name: Callable[[str], str]) -> List[TensorSet]:
    """Every tensor set the resumed process loaded before its first step, with how many of the parameters that
    step started from each holds."""
    samples = _first_samples(resumed)
    if samples is None:
        return []
    out = []
    for load in [e for e in resumed.loads if e.get("ts", 0.0) <= resumed.steps[0].get("ts", float("inf"))]:
        for held in load.get("sets") or []:
            path = load.get("path")
            out.append(TensorSet(name(path) if path else "a file object", held["key"], held["dtype"],
                                 tuple(held["samples"]), _matched(samples, held["samples"])))
    return out


def _model_set(took: TensorSet, sets: List[TensorSet]) -> Optional[TensorSet]:
    """The set in the same file that holds the model's own weights: the same tensor names, under a model key."""
    alike = [s for s in sets if s.path == took.path and s is not took and s.names == took.names
             and s.dtype not in HALF]
    for key in MODEL_KEYS:
        found = next((s for s in alike if s.key.rsplit(".", 1)[-1] == key), None)
        if found is not None:
            return found
    return None


def _fix(took: TensorSet, model: Optional[TensorSet], sets: List[TensorSet]) -> str:
    """The fix, naming where the model's own weights are; when the file holds no other copy of these tensors (an
    Ultralytics checkpoint: ``model`` None, the EMA module alone), that they must be saved first."""
    alone = not any(s.path == took.path and s is not took and s.names == took.names for s in sets)
    source = (f"from {_shown(model.key)}" if model is not None else
              f"from model.state_dict(), saved beside {_shown(took.key)} ({took.path} holds no other copy of them)"
              if alone else "from the tensors it saved from model.state_dict()")
    if any(word in took.key.lower() for word in AVERAGE_WORDS):
        return f"load the model's weights {source} and {_shown(took.key)} into the EMA module"
    if took.dtype in HALF:
        return f"load the model's full-precision weights {source}; keep the half-precision copy for inference"
    return f"load the model's weights {source}"


def took(took: TensorSet, sets: List[TensorSet], params: int) -> Finding:
    """The resume continued from ``took``: which tensors, not which it should have, and the fix."""
    model = _model_set(took, sets)
    what = "the half-precision copy " if took.dtype in HALF else "the tensors "
    rounded = (f" (the parameters equal its {took.dtype} values exactly: the weights rounded to half precision)"
               if took.dtype in HALF else "")
    instead = f", not the model's ({_shown(model.key)})" if model is not None else ""
    return Finding(
        "resumed-other-weights",
        f"the resume continued from {what}{_place(took)}{rounded}{instead}: "
        f"{_fix(took, model, sets)}",
        {"path": took.path, "key": took.key, "dtype": took.dtype, "params": params,
         "model_key": None if model is None else model.key},
    )


def unmatched(sets: List[TensorSet], params: int) -> Finding:
    """No set holds the resume's first parameters: said plainly, with the closest."""
    shown = ", ".join(_place(s) for s in sets[:SETS_NAMED])
    more = f" and {len(sets) - SETS_NAMED} more" if len(sets) > SETS_NAMED else ""
    best = max(sets, key=lambda s: s.matched)
    closest = (f"; the closest, {_place(best)}, holds {best.matched} of its {params} parameters"
               if best.matched else "")
    return Finding(
        "resumed-weights-unmatched",
        f"the resume's first parameters match none of the tensor sets in the checkpoints it loaded ({shown}{more})"
        f"{closest}: it changed them after the load, or took them from somewhere chaosckpt did not see it load",
        {"sets": [{"path": s.path, "key": s.key, "matched": s.matched} for s in sets], "params": params},
    )


def weights_taken(resumed: Optional[ProcessLog], name: Callable[[str], str]) -> List[Finding]:
    """For a resume that started from a state no run recorded: the tensor set in the files it loaded that its
    first parameters came from, or that none did; nothing when it loaded no tensor set chaosckpt could sample."""
    if resumed is None:
        return []
    sets = candidates(resumed, name)
    if not sets:
        return []
    params = len(_first_samples(resumed) or [])
    whole = [s for s in sets if s.matched == params and params]
    if not whole:
        return [unmatched(sets, params)]
    full = [s for s in whole if s.dtype not in HALF]
    return [took((full or whole)[-1], sets, params)]
