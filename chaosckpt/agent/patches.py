"""Every attribute the agent replaces, in one table, put in place and taken away by one mechanism.

Several layers replace the same function: ``builtins.open`` by the sandbox guard, the durability journal and
the writers' byte counter, ``os.rename`` by the guard, the journal and the moves. How they nest is data
(``LAYERS``, innermost first), not the order of the install calls: installing or removing a layer rebuilds
each attribute it patches from the original, through every installed layer in that order. A wrapper is built
once, around the function below it, and looks nothing up here when it is called.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

LAYERS: Tuple[str, ...] = (
    "guard",  # refuses writes outside the sandbox: innermost, it sees each call as the system will
    "refusals",  # reports the writes refused with EROFS, by the system or the guard, before the job sees them
    "journal",  # the durability journal (``fileops``): records what reaches the guard
    "moves",  # over the journal: a move's destination is tracked before the journal looks at the rename
    "writers",  # the checkpoint's byte counter: over the journal, which then sees the calls it counts
    "torch",  # the rest patch attributes no other layer touches
    "sampler",
    "skew",
    "dcp",
    "dcp-state-dict",
    "dcp-process",
    "dcp-helper",
    "safetensors",
    "threads",
)
"""The layers, innermost first: where two patch one attribute, the later one wraps the earlier."""


class Patch(NamedTuple):
    """One attribute one layer replaces: ``make(state, wrapped, *args)`` returns the replacement, where
    ``state`` is what the layer was installed with and ``wrapped`` the function below it."""

    layer: str
    owner: str  # the module or class holding the attribute, dotted: "os", "torch.optim.Optimizer"
    name: str
    make: str  # the wrapper factory, "module.function" in chaosckpt.agent
    args: Tuple[Any, ...] = ()
    optional: bool = False  # absent on some platforms, then left alone


def _os(layer: str, make: str, *names: str, args: Tuple[Any, ...] = ()) -> List[Patch]:
    return [Patch(layer, "os", name, make, args) for name in names]


def _open(layer: str, make: str) -> List[Patch]:
    return [Patch(layer, "builtins", "open", make), Patch(layer, "io", "open", make)]


DCP_PROCESS = "torch.distributed.checkpoint._async_process_executor"
"""Where DCP's process-mode ``async_save`` hands the staged state to its checkpoint process."""

TABLE: Tuple[Patch, ...] = (
    *_open("guard", "guard.refusing_open"),
    *_os("guard", "guard.refusing_os_open", "open"),
    *_os("guard", "guard.refusing", "mkdir", "remove", "unlink", "rmdir", "truncate", args=(0,)),
    *_os("guard", "guard.refusing", "rename", "replace", args=(0, 1)),
    *_os("guard", "guard.refusing", "symlink", "link", args=(1,)),
    *_open("refusals", "refusals.reported_open"),
    *_os("refusals", "refusals.reported_os_open", "open"),
    *(Patch("refusals", "os", name, "refusals.reported", (name, 0)) for name in ("mkdir", "remove", "unlink", "rmdir",
                                                                                "truncate", "chmod")),
    *(Patch("refusals", "os", name, "refusals.reported", (name, 0, 1)) for name in ("rename", "replace")),
    *(Patch("refusals", "os", name, "refusals.reported", (name, 1)) for name in ("symlink", "link")),
    *_open("journal", "fileops.tracked_open"),
    *_os("journal", "fileops.tracked_os_open", "open"),
    *_os("journal", "fileops.tracked_write", "write"),
    *_os("journal", "fileops.tracked_pwrite", "pwrite"),
    *_os("journal", "fileops.tracked_writev", "writev"),
    Patch("journal", "os", "pwritev", "fileops.tracked_pwritev", optional=True),
    *_os("journal", "fileops.tracked_sendfile", "sendfile"),
    *_os("journal", "fileops.tracked_sync", "fsync", "fdatasync"),
    *_os("journal", "fileops.tracked_close", "close"),
    *_os("journal", "fileops.tracked_rename", "replace", "rename"),
    *_os("journal", "fileops.tracked_unlink", "unlink", "remove", args=("unlink",)),
    *_os("journal", "fileops.tracked_unlink", "rmdir", args=("rmdir",)),
    *_os("journal", "fileops.tracked_mkdir", "mkdir"),
    *_os("journal", "fileops.tracked_symlink", "symlink"),
    *_os("journal", "fileops.tracked_link", "link"),
    *_os("moves", "moves.observed", "rename", "replace", args=("rename",)),
    Patch("moves", "os", "link", "moves.observed", ("link",)),
    Patch("moves", "shutil", "move", "moves.observed", ("move",)),
    Patch("moves", "shutil", "copyfile", "moves.observed", ("copy",)),
    *_open("writers", "writers.counted_open"),
    *_os("writers", "writers.counted_os_open", "open"),
    *_os("writers", "writers.counted_write", "write"),
    *_os("writers", "writers.counted_pwrite", "pwrite"),
    *_os("writers", "writers.counted_writev", "writev"),
    Patch("writers", "os", "pwritev", "writers.counted_pwritev", optional=True),
    *_os("writers", "writers.counted_sendfile", "sendfile"),
    Patch("writers", "os", "copy_file_range", "writers.counted_copy_file_range", optional=True),
    *_os("writers", "writers.counted_close", "close"),
    Patch("torch", "torch.optim.Optimizer", "__init__", "interpose.optimizer_init"),
    Patch("torch", "torch.Tensor", "backward", "interpose.backward"),
    Patch("torch", "torch.autograd", "backward", "interpose.backward"),
    Patch("torch", "torch.amp.GradScaler", "scale", "interpose.scale"),
    Patch("torch", "torch.amp.GradScaler", "update", "interpose.scaler_update"),
    *(Patch("torch", module, name, f"interpose.torch_{name}") for module in ("torch.serialization", "torch")
      for name in ("save", "load")),
    Patch("torch", "torch.nn.Module", "load_state_dict", "interpose.restore", ("module",)),
    Patch("torch", "torch.optim.Optimizer", "load_state_dict", "interpose.restore", ("optimizer",)),
    Patch("torch", "torch", "set_rng_state", "interpose.rng_restore", ("torch-rng",)),
    Patch("torch", "torch.random", "set_rng_state", "interpose.rng_restore", ("torch-rng",)),
    Patch("torch", "random", "setstate", "interpose.rng_restore", ("python-rng",)),
    Patch("sampler", "torch.utils.data.dataloader._BaseDataLoaderIter", "_next_index", "sampler.next_index"),
    Patch("skew", "torch.utils.data.DistributedSampler", "set_epoch", "sampler.skewed_set_epoch"),
    Patch("dcp", "torch.distributed.checkpoint", "save", "interpose.dcp_save"),
    Patch("dcp", "torch.distributed.checkpoint.state_dict_saver", "save", "interpose.dcp_save"),
    Patch("dcp", "torch.distributed.checkpoint", "load", "interpose.dcp_load"),
    Patch("dcp-state-dict", "torch.distributed.checkpoint.state_dict", "_init_optim_state",
          "interpose.hidden_step"),
    Patch("dcp-process", f"{DCP_PROCESS}._ProcessBasedAsyncCheckpointExecutor", "execute_save",
          "interpose.dcp_process_handoff"),
    Patch("dcp-helper", f"{DCP_PROCESS}._AsyncCheckpointProcess", "_checkpointing_subprocess",
          "runtime.checkpoint_process"),
    Patch("safetensors", "safetensors.torch", "save_file", "interpose.safetensors_save_file"),
    Patch("threads", "threading.Thread", "start", "threads.thread_start"),
    Patch("threads", "concurrent.futures.ThreadPoolExecutor", "submit", "threads.executor_submit"),
    Patch("threads", "queue.Queue", "get", "threads.queue_get"),
    Patch("threads", "concurrent.futures.Future", "result", "threads.future_result"),
    Patch("threads", "concurrent.futures.Future", "exception", "threads.future_exception"),
)


def _chains() -> Dict[Tuple[str, str], List[Patch]]:
    chains: Dict[Tuple[str, str], List[Patch]] = {}
    for patch in sorted(TABLE, key=lambda p: LAYERS.index(p.layer)):
        chains.setdefault((patch.owner, patch.name), []).append(patch)
    return chains


_CHAINS = _chains()
"""Each patched attribute's patches, innermost first."""

_ABSENT = object()
_lock = threading.RLock()  # a factory's import may run an import hook that installs a layer
_states: Dict[str, Any] = {}  # installed layer -> what it was installed with


class _Slot:
    """One patched attribute: what was there before the agent, and what the agent last put there."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner = owner
        self.name = name
        self.saved = vars(owner).get(name, _ABSENT)  # as stored, so that restoring puts back the same object
        self.base = getattr(owner, name)
        self.current: Any = None

    def restore(self) -> None:
        if self.saved is _ABSENT:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.saved)


_slots: Dict[Tuple[str, str], _Slot] = {}


def resolve(dotted: str) -> Any:
    """The module or class named ``dotted``."""
    module = sys.modules.get(dotted)
    if module is not None:
        return module
    parent, _, attribute = dotted.rpartition(".")
    return getattr(resolve(parent), attribute) if parent else importlib.import_module(dotted)


def _factory(patch: Patch) -> Callable[..., Callable]:
    module, _, function = patch.make.rpartition(".")
    return getattr(importlib.import_module(f"chaosckpt.agent.{module}"), function)


def _wrap(patch: Patch, wrapped: Callable) -> Callable:
    replacement = functools.wraps(wrapped)(_factory(patch)(_states[patch.layer], wrapped, *patch.args))
    replacement.__chaosckpt_original__ = wrapped
    return replacement


def _rebuild(key: Tuple[str, str]) -> None:
    """Put on one attribute its original wrapped by every installed layer, in ``LAYERS`` order."""
    owner_name, name = key
    owner = resolve(owner_name)
    slot = _slots.get(key)
    if slot is None or getattr(owner, name) is not slot.current:  # replaced by someone else: theirs is the original
        if not hasattr(owner, name):
            return  # an optional attribute this platform lacks
        slot = _slots[key] = _Slot(owner, name)
    chain = slot.base
    for patch in _CHAINS[key]:
        if patch.layer in _states:
            chain = _wrap(patch, chain)
    if chain is slot.base:
        slot.restore()
        del _slots[key]
    else:
        setattr(owner, name, chain)
        slot.current = chain


def _keys(layer: str) -> List[Tuple[str, str]]:
    return list(dict.fromkeys((p.owner, p.name) for p in TABLE if p.layer == layer))


def install(layer: str, state: Any) -> None:
    """Patch what ``layer`` patches, its wrappers built over ``state``; installed again, it replaces itself."""
    if layer not in LAYERS:
        raise ValueError(f"no patch layer {layer!r}")
    with _lock:
        _states[layer] = state
        for key in _keys(layer):
            _rebuild(key)


def uninstall(layer: str) -> None:
    """Take ``layer``'s wrappers away; an attribute no layer patches any more gets its original back."""
    with _lock:
        if _states.pop(layer, _ABSENT) is _ABSENT:
            return
        for key in _keys(layer):
            if key in _slots:
                _rebuild(key)


def installed() -> Tuple[str, ...]:
    """The installed layers, innermost first."""
    return tuple(layer for layer in LAYERS if layer in _states)
