"""What a checkpoint object holds, and what a resume will miss: view bloat, sizes, RNG states, counters.

Shared by ``chaosckpt audit`` (on objects rebuilt from files without running them) and by the
in-process agent (on the object handed to ``torch.save``), so it imports only the standard library
and torch, and torch only where a walk looks at objects: the conductor judges scans without it. The walk reads tensor metadata (storage size, offset, strides, a storage identity) and
never copies, moves or synchronises data, so it is cheap enough to run at every save.

Entry points: :func:`scan` (one walk, returns a plain ``dict``), :func:`findings` (advice from a
scan, plus what the caller knows about the loop), and :func:`analyse` (both).
"""

from __future__ import annotations

import itertools
import numbers
import random
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    import torch

VIEW_BLOAT_RATIO = 4
"""A storage is bloat when it is more than this many times the bytes its saved views need..."""
VIEW_BLOAT_MIN_WASTE = 1 << 20
"""...and wastes at least this many bytes (1 MiB), so small buffers and padding never count."""

TORCH_CPU_RNG_BYTES = 5056
"""Size of a torch CPU generator state (``torch.get_rng_state()``, ``Generator.get_state()``)."""
CUDA_RNG_BYTES = 16
"""Size of one CUDA (Philox) generator state: seed and offset."""

_PROGRESS = re.compile(
    r"(?:global_|current_|cur_|curr_|train_|training_|completed_|last_)?"
    r"(?:step|steps|epoch|epochs|iter|iters|iteration|iterations|it|update|updates|"
    r"batch|batches|sample|samples|token|tokens)"
    r"(?:_num|_idx|_index|_count|_counter|_seen)?"
)
"""Names of loop counters: step, global_step, epoch, iter_num, tokens_seen... (not num_/total_/max_, which are settings)."""
_LOADER = re.compile(r".*(?:sampler|loader|datamodule|data_state|dataset_state).*")
_SETTINGS = frozenset({"config", "cfg", "args", "hparams", "hyper_parameters", "hyperparameters",
                       "settings", "model_args", "train_config", "opts", "options"})
_STATEFUL_LOADER_KEYS = ("_num_yielded", "_sampler_iter_state", "_snapshot", "_iterator_finished")
PATH_MAX = 400
KEYS_MAX = 1000
"""Top-level keys described one by one (a checkpoint of more, a list of a million tensors, has the rest counted),
and RNG states listed at most."""
_LEAVES = (str, bytes, int, float, type(None))
_RNG_LENGTHS = (3, 5)
"""The lengths of the sequences ``rng_kind`` can recognise (Python's and numpy's states)."""
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-]+")


def human_bytes(n: int) -> str:
    """``4000000`` -> ``4.0 MB`` (decimal units, as file sizes are usually quoted)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _child(path: str, key: Any) -> str:
    """Key path of ``key`` under ``path``: ``model.head.weight``, ``opt.state[0].exp_avg``, ``x['a b']``.

    Past ``PATH_MAX`` characters the path stops growing (it ends in ``...``), so that walking a deeply nested
    object takes time linear in its size."""
    if len(path) > PATH_MAX:
        return path if path.endswith("...") else path + "..."
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}[{key!r}]"


def _storage_key(storage: Any) -> Tuple[str, int]:
    """Identity of an untyped storage: its data pointer, or its C handle where there is no data (meta, empty, or
    freed: a staged copy a background save already released)."""
    try:
        ptr = storage.data_ptr()
    except RuntimeError:
        ptr = 0
    if ptr:
        return storage.device.type, ptr
    return "handle", getattr(storage, "_cdata", id(storage))


def _is_array(value: Any, dtype: str, shape: Tuple[int, ...]) -> bool:
    """A numpy array (or audit's stand-in for one) of this dtype and shape; never a torch tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return False
    return tuple(getattr(value, "shape", ()) or ()) == shape and str(getattr(value, "dtype", "")) == dtype


def rng_kind(value: Any, path: str = "") -> Optional[str]:
    """What kind of random-stream state ``value`` is, or None. ``path`` disambiguates CUDA states."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype != torch.uint8 or value.dim() != 1:
            return None
        if value.numel() == TORCH_CPU_RNG_BYTES:
            return "torch CPU generator"
        if value.numel() == CUDA_RNG_BYTES and "cuda" in path.lower():
            return "CUDA generator"
        return None
    if isinstance(value, (tuple, list)):
        if len(value) == 3 and type(value[0]) is int and value[0] == 3 and isinstance(value[1], (tuple, list)) \
                and len(value[1]) == 625 and (value[2] is None or isinstance(value[2], float)):
            return "Python random"
        if len(value) == 5 and isinstance(value[0], str) and value[0] == "MT19937" and (
                _is_array(value[1], "uint32", (624,)) or (isinstance(value[1], list) and len(value[1]) == 624)):
            return "numpy RandomState (MT19937)"
        return None
    if isinstance(value, Mapping):
        name = value.get("bit_generator")
        if isinstance(name, str) and isinstance(value.get("state"), Mapping):
            return f"numpy bit generator ({name})"
        return None
    if isinstance(value, torch.Generator):
        return f"torch.Generator object ({value.device})"
    if isinstance(value, random.Random):
        return "random.Random object"
    kind = type(value)
    if kind.__module__.startswith("numpy.random") and kind.__name__ in ("Generator", "RandomState"):
        return f"numpy {kind.__name__} object"
    return None


def _progress_value(value: Any) -> Tuple[bool, Optional[int]]:
    """Whether ``value`` can be a loop counter (an integer, or a 0-d integer tensor) and its value if cheap."""
    import torch

    if isinstance(value, bool):
        return False, None
    if isinstance(value, numbers.Integral):
        return True, int(value)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() \
            and not value.is_complex() and value.dtype != torch.bool:
        return True, int(value) if value.device.type == "cpu" else None
    return False, None


def _is_internal(value: Mapping) -> bool:
    """An optimizer or LR-scheduler state dict: its ``step``/``last_epoch`` are not the loop's own counter."""
    return ("state" in value and "param_groups" in value) or (
        "last_epoch" in value and ("_step_count" in value or "base_lrs" in value))


def _elements(value: Sequence, path: str, top: str, internal: bool) -> Iterator[Tuple[Any, str, str, bool]]:
    """A list's or tuple's items to walk, with their key paths, drawn one at a time."""
    for index, item in enumerate(value):
        child = _child(path, index)
        yield item, child, top or child, internal


class _Walk:
    """One pass over a checkpoint object: collects tensors by storage, RNG states, counters, loader states."""

    def __init__(self, tops: Sequence[str] = ()) -> None:
        self.tops = set(tops)
        """The top-level keys whose bytes and tensors are counted apart (at most :data:`KEYS_MAX`)."""
        self.tensors = 0
        self.storage_of: Dict[int, Optional[Tuple[str, int]]] = {}
        """Per tensor object (by id; the checkpoint keeps each alive), its storage's identity."""
        self.storage_bytes: Dict[Any, int] = {}
        self.views: Dict[Any, List[Tuple[str, int, int, int, str, Tuple[int, ...]]]] = {}
        self.key_storages: Dict[str, set] = {}
        self.key_tensors: Dict[str, int] = {}
        self.rng: List[Dict[str, str]] = []
        self.progress: List[Dict[str, Any]] = []
        self.loaders: List[Dict[str, str]] = []
        self.optimizers: List[str] = []
        self.schedulers: List[str] = []
        self.scalers: List[str] = []
        self.weights = 0
        """Tensors outside optimizer and scheduler states that are no RNG state: a model's weights and buffers."""

    def tensor(self, t: torch.Tensor, path: str, top: str, internal: bool = False) -> None:
        """Count a reference to a tensor, under its top-level key; its storage and view are measured once per
        tensor object, however often the checkpoint refers to it."""
        self.tensors += 1
        kind = rng_kind(t, path)
        if kind and len(self.rng) < KEYS_MAX:
            self.rng.append({"path": path or "<root>", "kind": kind})
        self.weights += not kind and not internal
        if id(t) not in self.storage_of:
            self.storage_of[id(t)] = self._measure(t, path)
        if top in self.tops:
            self.key_tensors[top] = self.key_tensors.get(top, 0) + 1
            if self.storage_of[id(t)] is not None:
                self.key_storages.setdefault(top, set()).add(self.storage_of[id(t)])

    def _measure(self, t: torch.Tensor, path: str) -> Optional[Tuple[str, int]]:
        """Note a tensor's storage and the span its view covers; its storage's identity, None if it has none."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return None  # sparse, nested or wrapper-subclass tensors have no single storage to measure
        key = _storage_key(storage)
        self.storage_bytes[key] = storage.nbytes()
        size = t.element_size()
        numel = t.numel()
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0) if numel else 0
        self.views.setdefault(key, []).append(
            (path, t.storage_offset() * size, span * size, numel * size, str(t.dtype).replace("torch.", ""), tuple(t.shape)))
        return key

    def loader(self, path: str) -> None:
        if all(entry["path"] != path for entry in self.loaders):
            self.loaders.append({"path": path})

    def run(self, obj: Any) -> None:
        """Depth first, each container's children drawn one at a time and each object walked once, so that the
        walk's memory follows the object's depth and distinct objects, not how often a pickle refers to them."""
        import torch

        seen: set = set()
        stack: List[Iterator[Tuple[Any, str, str, bool]]] = [iter([(obj, "", "", False)])]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            value, path, top, internal = entry
            if isinstance(value, _LEAVES):
                continue
            sequence = isinstance(value, (list, tuple))  # checked first: torch.Tensor's isinstance is slow
            if not sequence and isinstance(value, torch.Tensor):
                self.tensor(value, path, top or "<root>", internal)
                continue
            kind = rng_kind(value, path) if not sequence or len(value) in _RNG_LENGTHS else None
            if kind:
                if len(self.rng) < KEYS_MAX:
                    self.rng.append({"path": path or "<root>", "kind": kind})
                continue
            if (sequence or isinstance(value, Mapping)) and id(value) not in seen:
                seen.add(id(value))
                stack.append(_elements(value, path, top, internal) if sequence else
                             self._items(value, path, top, internal))

    def _items(self, value: Mapping, path: str, top: str, internal: bool) -> Iterator[Tuple[Any, str, str, bool]]:
        """A mapping's entries to walk, after noting what its keys say (counters, loader and optimizer states)."""
        if "state" in value and "param_groups" in value:
            self.optimizers.append(path or "<root>")
        elif "last_epoch" in value and ("_step_count" in value or "base_lrs" in value):
            self.schedulers.append(path or "<root>")
        elif "scale" in value and "_growth_tracker" in value:
            self.scalers.append(path or "<root>")
        internal = internal or _is_internal(value)
        if not internal and path and any(k in value for k in _STATEFUL_LOADER_KEYS):
            self.loader(path)
        for key, item in value.items():
            name = key.lower() if isinstance(key, str) else ""
            if not internal and name and _PROGRESS.fullmatch(name):
                ok, number = _progress_value(item)
                if ok:
                    self.progress.append({"path": _child(path, key), "name": key, "value": number})
            if not internal and name and _LOADER.fullmatch(name) and isinstance(item, Mapping) and item:
                self.loader(_child(path, key))
        return ((item, _child(path, key), top or _child("", key),
                 internal or (isinstance(key, str) and key.lower() in _SETTINGS)) for key, item in value.items())

    def bloat(self) -> List[Dict[str, Any]]:
        """Storages much larger than all their saved views together: one entry per storage, not per view."""
        out = []
        for key, views in self.views.items():
            stored = self.storage_bytes[key]
            spans = sorted((start, start + span) for _, start, span, _, _, _ in views)
            covered, end = 0, -1
            for lo, hi in spans:
                if hi > end:
                    covered += hi - max(lo, end)
                    end = hi
            needed = min(covered, sum(v[3] for v in views))
            if stored > VIEW_BLOAT_RATIO * needed and stored - needed >= VIEW_BLOAT_MIN_WASTE:
                paths = [v[0] or "<root>" for v in views]
                first = views[0]
                out.append({"path": paths[0], "paths": paths, "view_bytes": needed, "stored_bytes": stored,
                            "dtype": first[4], "shape": list(first[5])})
        return sorted(out, key=lambda b: -b["stored_bytes"])


def scan(obj: Any) -> Dict[str, Any]:
    """Walk a checkpoint object once and describe it as a plain, JSON-ready ``dict``.

    Keys: ``bytes`` (unique tensor storage bytes in all), ``tensors``, ``keys`` (per top-level key, the first
    :data:`KEYS_MAX`: ``key``, ``bytes`` of the unique storages under it, ``tensors``), ``keys_more`` (how many
    top-level keys past those), ``bloat`` (storages much larger
    than their saved views), ``rng_states`` (``path``, ``kind``), ``progress`` (step/epoch-like
    integers: ``path``, ``name``, ``value``), ``loader_states`` (``path``), ``optimizer_states`` (paths
    of optimizer state dicts: what makes a file a training checkpoint, not just weights), ``scheduler_states``
    and ``scaler_states`` (paths of LR-scheduler and GradScaler state dicts) and ``weights`` (tensors outside
    those that are no RNG state). Containers are dicts,
    mappings, lists and tuples; other objects are not looked into.
    """
    if isinstance(obj, (Mapping, list, tuple)):
        count = len(obj)
        tops = [_child("", k) for k in itertools.islice(obj if isinstance(obj, Mapping) else range(count), KEYS_MAX)]
    else:
        count, tops = 1, ["<root>"]
    walk = _Walk(tops)
    walk.run(obj)
    if tops == ["<root>"] and not walk.tensors:
        count, tops = 0, []
    keys = [{"key": top, "bytes": sum(walk.storage_bytes[s] for s in walk.key_storages.get(top, ())),
             "tensors": walk.key_tensors.get(top, 0)} for top in tops]
    return {
        "bytes": sum(walk.storage_bytes.values()),
        "tensors": walk.tensors,
        "keys": keys,
        "keys_more": count - len(tops),
        "bloat": walk.bloat(),
        "rng_states": walk.rng,
        "progress": walk.progress,
        "loader_states": walk.loaders,
        "optimizer_states": walk.optimizers,
        "scheduler_states": walk.schedulers,
        "scaler_states": walk.scalers,
        "weights": walk.weights,
    }


_MODEL_KEYS = ("state_dict", "model", "model_state_dict", "module", "net", "network")


def whole(contents: Dict[str, Any]) -> bool:
    """Whether one saved object is a whole training state (model and optimizer: a Lightning ``.ckpt``), so
    that the file alone resumes training, unlike a Trainer's ``optimizer.pt``."""
    names = {str(k["key"]).lower() for k in contents["keys"]}
    return bool(contents["optimizer_states"]) and any(k in names for k in _MODEL_KEYS)


def merge(parts: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One :func:`scan` result for a checkpoint written as several objects (a Trainer's model, optimizer
    and RNG files): what any of them holds, the checkpoint holds."""
    merged: Dict[str, Any] = {"bytes": 0, "tensors": 0, "keys": [], "keys_more": 0, "bloat": [], "rng_states": [], "progress": [],
                              "loader_states": [], "optimizer_states": [], "scheduler_states": [], "scaler_states": [],
                              "weights": 0}
    for part in parts:
        for key, value in part.items():
            merged[key] = merged[key] + value
    return merged


def training_state(contents: Dict[str, Any]) -> Dict[str, List[str]]:
    """The parts of a training state a checkpoint holds and lacks, as coverage lists lines run and missed:
    ``{"holds": [...], "lacks": [...]}``, each part named as the audit prints it. Found by what the saved objects
    are (an optimizer's state dict, a scheduler's, RNG states, counters), whatever their keys are called. What a
    checkpoint lacks costs a resume only where the job has that part: a loop without a scheduler needs none."""
    rng = sorted({r["kind"] for r in contents["rng_states"]})
    loader = contents["loader_states"] or any(_LOADER.fullmatch(r["path"].lower()) for r in contents["rng_states"])
    parts = [("model weights", contents.get("weights", 0) > 0),
             ("optimizer state", bool(contents["optimizer_states"])),
             ("LR scheduler state", bool(contents.get("scheduler_states"))),
             ("GradScaler state", bool(contents.get("scaler_states"))),
             (f"RNG states ({', '.join(rng)})" if rng else "RNG states", bool(rng)),
             ("step or epoch counter", bool(contents["progress"])),
             ("data position", bool(loader))]
    return {"holds": [name for name, held in parts if held], "lacks": [name for name, held in parts if not held]}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _bloat_finding(b: Dict[str, Any]) -> Dict[str, Any]:
    views = b["paths"]
    shape = "x".join(str(n) for n in b["shape"]) or "scalar"
    what = f"{views[0]} ({b['dtype']}[{shape}])" if len(views) == 1 else f"{', '.join(views)} ({len(views)} views)"
    message = (f"{what} needs {human_bytes(b['view_bytes'])} but is a view of a {human_bytes(b['stored_bytes'])} "
               f"storage, and the checkpoint stores all of it; save a copy instead: "
               f"{views[0]}.clone() before putting it in the checkpoint")
    return {"kind": "checkpoint-view-bloat", "message": message, **b}


def rng_states_missing(rng: List[Dict[str, Any]], streams: Union[int, Sequence[str]]) -> Optional[Dict[str, Any]]:
    """The ``rng-states-missing`` finding for a checkpoint carrying the RNG states ``rng`` in a loop that draws from
    ``streams`` (a count, or their names); None when it carries as many states as there are streams."""
    names = [streams] if isinstance(streams, str) else list(streams) if not isinstance(streams, int) else []
    count = streams if isinstance(streams, int) else len(names)
    if len(rng) >= count:
        return None
    listed = f" ({', '.join(names)})" if names else ""
    carries = f"carries {_plural(len(rng), 'RNG state')}" if rng else "carries no RNG state"
    return {"kind": "rng-states-missing", "message": (
        f"this checkpoint {carries}; the loop draws from {_plural(count, 'stream')}{listed}: "
        "a resume continues the others from wherever they happen to be, and the run diverges; "
        "save and restore every stream's state"),
        "rng_states": rng, "streams": names or count}


def findings(contents: Dict[str, Any], *, streams: Union[int, Sequence[str], None] = None,
             loader: Optional[bool] = None, training: Optional[bool] = None) -> List[Dict[str, Any]]:
    """Findings (``{"kind", "message", ...evidence}``) from a :func:`scan` result.

    ``streams``: how many random streams the loop draws from (a count, or their names), when the
    caller knows; ``loader``: whether the loop iterates a data loader whose position matters;
    ``training``: whether the file is meant to resume training from (None: when it carries optimizer
    state; a file of weights alone is an export, and needs no step counter). Kinds:
    ``checkpoint-view-bloat``, ``no-step-in-checkpoint``, ``rng-states-missing``, ``no-loader-state``.
    """
    out = [_bloat_finding(b) for b in contents["bloat"]]
    if training is None:
        training = bool(contents.get("optimizer_states"))
    if training and not contents["progress"]:
        out.append({"kind": "no-step-in-checkpoint", "message": (
            "no step or epoch counter in the checkpoint: a job resumed from it cannot tell how far training got; "
            "save the global step (and the epoch) beside the model and optimizer state")})
    rng = contents["rng_states"]
    missing = rng_states_missing(rng, streams) if streams is not None else None
    if missing is not None:
        out.append(missing)
    if loader and not contents["loader_states"] and not any(_LOADER.fullmatch(r["path"].lower()) for r in rng):
        out.append({"kind": "no-loader-state", "message": (
            "the loop iterates a data loader but the checkpoint holds no sampler or loader state: a resume "
            "replays the data order from the start of the epoch; save the sampler's epoch and generator state "
            "(or use a loader with state_dict(), such as torchdata's StatefulDataLoader)")})
    return out


def analyse(obj: Any, *, streams: Union[int, Sequence[str], None] = None,
            loader: Optional[bool] = None, training: Optional[bool] = None) -> Dict[str, Any]:
    """:func:`scan` and :func:`findings` in one call: ``{"contents": ..., "findings": [...]}``."""
    contents = scan(obj)
    return {"contents": contents, "findings": findings(contents, streams=streams, loader=loader, training=training)}
