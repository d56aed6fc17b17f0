"""Which modules of the model being trained are in eval mode at each step.

``model.training`` never enters a state dict, so a resume that runs a validation
pass and forgets ``train()`` trains on with dropout off and batch norm frozen. At
the first step the agent finds the root modules that own the optimizer's
parameters and caches their submodules (parameterless ones such as Dropout
included); checking ``.training`` on them is a few microseconds per step.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import List, Tuple

import torch

MAX_NAMES = 50


def script_name(root: object) -> str:
    """The name the job's script gives ``root`` at module level, else its class's."""
    main = sys.modules.get("__main__")
    for name, value in vars(main).items() if main is not None else ():
        if value is root:
            return name
    return type(root).__name__


def roots_of(params: List[torch.Tensor]) -> List[torch.nn.Module]:
    """The outermost modules holding any of ``params``."""
    ids = {id(p) for p in params}
    owning = [o for o in gc.get_objects() if issubclass(type(o), torch.nn.Module)
              and any(id(p) in ids for p in o.parameters())]
    inner = {id(c) for m in owning for c in m.modules() if c is not m}
    return [m for m in owning if id(m) not in inner]


class Modes:
    """The cached submodules of the optimized model trees, named ``model.2 (Dropout)``; held weakly, so a job
    that builds a new model frees the old one."""

    def __init__(self) -> None:
        self.modules: List[Tuple[str, weakref.ref]] = []
        self.roots: List[weakref.ref] = []

    def discover(self, params: List[torch.Tensor]) -> None:
        seen = set()
        self.modules = []
        roots = sorted(roots_of(params), key=script_name)
        self.roots = [weakref.ref(root) for root in roots]
        for root in roots:
            label = script_name(root)
            for name, module in root.named_modules():
                if id(module) not in seen:
                    seen.add(id(module))
                    name = f"{label}.{name} ({type(module).__name__})" if name else label
                    self.modules.append((name, weakref.ref(module)))

    def live_roots(self) -> List[torch.nn.Module]:
        """The outermost modules of the optimized model trees, as found at the first step."""
        return [root for root in (ref() for ref in self.roots) if root is not None]

    def in_eval(self) -> List[str]:
        names = []
        for name, ref in self.modules:
            module = ref()
            if module is not None and not module.training:
                names.append(name)
        return names[:MAX_NAMES]
