"""The sets of tensors a loaded checkpoint holds (the model's state_dict, an EMA copy, a half-precision copy...),
each with a sample of its values, so the conductor can tell which of them a resume's parameters came from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Dict, Iterator, List, Tuple

import torch

from chaosckpt.agent import fingerprint

MAX_TENSORS = 20_000
"""Tensors sampled in one loaded object at most: a checkpoint of more is described by its first sets."""
MAX_DEPTH = 6


def _sets(obj: object, key: str, depth: int) -> Iterator[Tuple[str, Dict[str, torch.Tensor]]]:
    """(key path, {name: floating tensor}) of every mapping with string keys that holds floating tensors; a
    pickled module counts as its state_dict (an EMA saved as the module itself, as Ultralytics saves it)."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, Mapping) or depth > MAX_DEPTH or not all(isinstance(k, str) for k in obj):
        return
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    if tensors:
        yield key, tensors
    for name, value in obj.items():
        if isinstance(value, (Mapping, torch.nn.Module)):
            yield from _sets(value, f"{key}.{name}" if key else name, depth + 1)


def tensor_sets(obj: object) -> List[Dict[str, object]]:
    """``[{"key", "dtype", "samples": {name: sample CRC}}]`` for the tensor sets of a loaded object (``key`` is
    "" for the object itself: a bare state_dict), up to ``MAX_TENSORS`` tensors in all."""
    out: List[Dict[str, object]] = []
    budget = MAX_TENSORS
    for key, tensors in _sets(obj, "", 0):
        names = list(tensors)[:budget]
        if not names:
            break
        budget -= len(names)
        crcs = fingerprint.value_samples(tensors[n] for n in names)
        dtypes = sorted({str(tensors[n].dtype).replace("torch.", "") for n in names})
        out.append({"key": key, "dtype": "/".join(dtypes), "samples": dict(zip(names, crcs))})
    return out
