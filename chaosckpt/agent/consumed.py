"""What the model consumed at each step: a fingerprint of its outermost module's input, whatever fed it.

A resume that replays or skips steps trains on other batches than the uninterrupted run at the same step. The
DataLoader patch names a batch by its dataset indices; a loop that slices a tensor with a counter, reads an
iterable dataset or a generator has no indices. So the agent also names each step by what the model consumed:
the first module with parameters that the job calls (the outermost, since its pre-hook runs before its
children's) is the root, and the first tensor of the root's latest call before the step is fingerprinted at the
step (a strided sample of its values and its shape). A global forward hook runs only until the root is found;
after that one hook on the root costs a Python call per forward, and the sample is taken once per step. The same
hook notes the device streams as the step's first forward begins (``on_forward``), before dropout draws: where no
DataLoader marks the fetch of a batch, that is the point a resume in eval mode is compared at.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch

from chaosckpt.agent import fingerprint

SAMPLES = 64
"""Values sampled from the input tensor."""


def _first_tensor(args: Any, kwargs: Any) -> Optional[torch.Tensor]:
    """The first tensor among a forward's positional arguments, then its keyword arguments, one level into
    lists, tuples and dicts (a batch handed over as a dict of tensors)."""
    for value in [*args, *(kwargs or {}).values()]:
        if isinstance(value, torch.Tensor):
            return value
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for item in inner:
            if isinstance(item, torch.Tensor):
                return item
    return None


class Consumed:
    """The root module's latest input, kept until the step takes its fingerprint."""

    def __init__(self, on_forward: Callable[[], None] = lambda: None) -> None:
        self._on_forward = on_forward
        """Called as the root's forward begins, before anything in it draws (the device streams' fetch point)."""
        self._finder: Optional[Any] = None
        self._root: Optional[weakref.ref] = None
        self._latest: Optional[torch.Tensor] = None

    def install(self) -> None:
        self._finder = torch.nn.modules.module.register_module_forward_pre_hook(self._find)

    def _find(self, module: torch.nn.Module, args: Any) -> None:
        if self._root is not None or next(module.parameters(), None) is None:
            return
        self._root = weakref.ref(module)
        module.register_forward_pre_hook(self._keep, with_kwargs=True)
        self._keep(module, args, {})
        if self._finder is not None:
            self._finder.remove()

    def _keep(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if not torch.is_grad_enabled():  # an evaluation pass (a resume's validation): not the step's batch
            return
        self._latest = _first_tensor(args, kwargs)
        self._on_forward()

    def take(self) -> Optional[str]:
        """The fingerprint of what the root consumed last, once: ``crc.shape``; None when it ran no forward."""
        tensor, self._latest = self._latest, None
        if tensor is None:
            return None
        with torch.no_grad():
            flat = fingerprint.local(tensor).detach().reshape(-1)
            sample = flat[::max(1, flat.numel() // SAMPLES)][:SAMPLES]
            shape = "x".join(str(n) for n in tensor.shape)
        return f"{fingerprint.crc_of_tensor(sample):08x}.{shape}"
