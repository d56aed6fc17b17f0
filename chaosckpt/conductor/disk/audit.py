"""Inspect checkpoint files without running anything from them.

A torch checkpoint is a pickle, and unpickling runs whatever callables the pickle names. Here the
pickle is read by an unpickler whose ``find_class`` hands out only an allowlist of harmless
constructors (containers, tensor rebuilders that make *meta* tensors, dtypes, numpy stand-ins);
every other name becomes a :class:`PickledObject` placeholder that records what would have been
called, with which arguments, and runs nothing. Storages become meta storages of the size of their
data records, so sizes, views and sharing are exact while no tensor data is read into memory. The
data records are still read once, in chunks, to check their CRCs: a file torch could not load must
never pass.

Formats: torch zip archives (``torch.save`` since 1.6), the legacy torch format
(``_use_new_zipfile_serialization=False``), plain pickles, and safetensors files (their header only).
"""

from __future__ import annotations

import _compat_pickle
import contextlib
import gc
import io
import os
import pickle
import pickletools
import re
import stat
import struct
import sys
import warnings
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from chaosckpt import checkpoint_content
from chaosckpt.conductor.disk import safetensors_header

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""First pickle of a legacy (non-zip) torch file."""
_CHUNK = 1 << 24
INFLATE_FACTOR = 4
INFLATE_MIN = 16 << 20
INFLATE_MAX = 1 << 30


CALLS_SHOWN = 5
"""Calls of one pickled callable the report shows; the rest are counted, so a flood of calls is one short line."""
NAMES_SHOWN = 20
"""Names or calls a finding lists; more are counted ("and 9980 more")."""
NAMES_MAX = 10_000
"""Distinct globals one file may name: a checkpoint names a few dozen; each costs a placeholder class."""


def inflate_limit(size: int) -> int:
    """How many bytes a record may inflate to by default: a few times the file's size, within 16 MiB..1 GiB."""
    return min(max(INFLATE_FACTOR * size, INFLATE_MIN), INFLATE_MAX)

_DANGEROUS_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "_posixsubprocess", "pty", "sys", "shutil", "importlib", "runpy", "code", "codeop",
    "ctypes", "socket", "pickle", "_pickle", "marshal", "dill", "webbrowser", "platform", "pydoc",
    "multiprocessing", "asyncio", "signal", "tempfile", "timeit", "cProfile", "profile", "pdb", "bdb",
    "commands", "popen2", "torch.hub", "torch.utils.cpp_extension", "torch.jit", "torch.package",
    "torch.utils.collect_env", "numpy.testing", "numpy.f2py", "numpy.distutils",
})
_DANGEROUS_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "input", "breakpoint", "exit", "quit", "help", "memoryview", "print",
})
_DANGEROUS_NAMES = frozenset({"operator.attrgetter", "operator.methodcaller", "_operator.attrgetter",
                              "_operator.methodcaller", "functools.partial", "functools.reduce", "_functools.partial",
                              "_functools.reduce", "types.FunctionType", "types.CodeType", "torch.load",
                              "torch.serialization.load", "numpy.load", "numpy.lib.npyio.load", "io.open", "_io.open",
                              "_io.FileIO", "codecs.open", "uuid._get_command_stdout",
                              "torch.fx.graph_module._exec_with_source"})
"""Callables known to run commands, code or file writes: named so in the finding (every name outside the
allowlist and :data:`KNOWN_OBJECTS` is ``unsafe-pickle`` all the same)."""
KNOWN_OBJECTS = frozenset({
    "argparse.Namespace", "pathlib.Path", "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.WindowsPath",
    "pathlib.PureWindowsPath", "torch.serialization._get_layout",
    "numpy.random._pickle.__randomstate_ctor", "numpy.random._pickle.__bit_generator_ctor",
    "numpy.random._pickle.__generator_ctor", "numpy.random.mtrand.RandomState", "numpy.random._generator.Generator",
    "numpy.random._mt19937.MT19937", "numpy.random._pcg64.PCG64", "numpy.random._pcg64.PCG64DXSM",
    "numpy.random._philox.Philox", "numpy.random._sfc64.SFC64", "numpy.random.bit_generator.SeedSequence",
    "numpy.random.bit_generator.__pyx_unpickle_SeedSequence",
    "torch.distributed.checkpoint.metadata.Metadata", "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata", "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata", "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta", "torch.distributed.checkpoint.filesystem._StorageInfo",
    "transformers.training_args.TrainingArguments", "transformers.training_args.OptimizerNames",
    "transformers.trainer_utils.SchedulerType", "transformers.trainer_utils.IntervalStrategy",
    "transformers.trainer_utils.SaveStrategy", "transformers.trainer_utils.HubStrategy",
    "transformers.trainer_pt_utils.AcceleratorConfig", "accelerate.state.PartialState",
    "accelerate.utils.dataclasses.DistributedType",
})
"""Objects ``torch.load(weights_only=True)`` refuses that audit knows to hold data (Namespaces, paths, numpy random
states, DCP's metadata, the Hugging Face Trainer's arguments), as do torch.nn's module classes: ``pickled-objects``.
Every other name outside the allowlist is ``unsafe-pickle``: nothing tells a class from a command by its name."""


class AuditError(Exception):
    """A file chaosckpt could not read as a checkpoint; the message is one line for the report."""


def is_known_object(name: str) -> bool:
    """Whether a global outside the allowlist is one audit knows as data: :data:`KNOWN_OBJECTS`, or a class of
    torch.nn's modules (looked up among the modules torch has imported; nothing is imported for it)."""
    if name in KNOWN_OBJECTS:
        return True
    module, _, attr = name.rpartition(".")
    if not module.startswith("torch.nn.") or not attr.isidentifier():
        return False
    value = getattr(sys.modules.get(module), attr, None)
    return isinstance(value, type) and issubclass(value, torch.nn.Module)


def is_dangerous(name: str) -> bool:
    """Whether a pickled callable can run commands or arbitrary code (``posix.system``, ``builtins.eval``...)."""
    module, _, attr = name.rpartition(".")
    if module in ("builtins", "__builtin__"):
        return attr in _DANGEROUS_BUILTINS
    return name in _DANGEROUS_NAMES or any(module == m or module.startswith(m + ".") for m in _DANGEROUS_MODULES)


class PickledObject(dict):
    """Stands where a pickle names something outside the allowlist: nothing is imported or called.

    Arguments and state are kept as items (``__args__``, the state's own keys, ``__items__``) so the
    walk still finds the tensors inside a pickled object. Subclasses are made per name by the
    unpickler and record every call in its ``calls`` list.
    """

    pickled_name = "?"
    log: Optional["PickleLog"] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "PickledObject":
        if cls.log is not None:
            cls.log.called(cls.pickled_name, args)
        return dict.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self)
        if args:
            self["__args__"] = list(args)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
            for part in state:
                self.update(part or {})
        elif isinstance(state, dict):
            self.update(state)
        else:
            self["__state__"] = state

    def append(self, item: Any) -> None:
        self.setdefault("__items__", []).append(item)

    def extend(self, items: Any) -> None:
        self.setdefault("__items__", []).extend(items)

    def __repr__(self) -> str:
        return f"<pickled {self.pickled_name}>"

    def __hash__(self) -> int:  # type: ignore[override]
        """By identity, so that a placeholder can be a dict key, as DCP's ``MetadataIndex`` is in ``.metadata``."""
        return id(self)


class NumpyDtype:
    """A numpy dtype as pickled (``numpy.dtype('u4', False, True)`` + state), without numpy."""

    _NAMES = {"b1": "bool", "i1": "int8", "u1": "uint8", "i2": "int16", "u2": "uint16", "i4": "int32",
              "u4": "uint32", "i8": "int64", "u8": "uint64", "f2": "float16", "f4": "float32", "f8": "float64",
              "c8": "complex64", "c16": "complex128", "O8": "object"}
    _STRUCT = {"b1": "?", "i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q",
               "u8": "Q", "f2": "e", "f4": "f", "f8": "d"}

    def __init__(self, code: Any = "", *args: Any) -> None:
        self.code = str(code)
        self.byteorder = "<"

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
            self.byteorder = state[1]

    def decode(self, data: Any) -> Any:
        fmt = self._STRUCT.get(self.code)
        if fmt is None or not isinstance(data, bytes) or len(data) != struct.calcsize(fmt):
            return None
        return struct.unpack(self.byteorder + fmt, data)[0]

    def __str__(self) -> str:
        return self._NAMES.get(self.code, self.code)


class NumpyArray:
    """A numpy array as pickled: its shape, dtype and byte count, without numpy."""

    def __init__(self, *args: Any) -> None:
        self.shape: Tuple[int, ...] = ()
        self.dtype: Any = ""
        self.nbytes = 0

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 5:
            _, shape, dtype, _, data = state
            self.shape = tuple(int(n) for n in shape)
            self.dtype = dtype
            self.nbytes = len(data) if isinstance(data, (bytes, bytearray)) else 0


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    """``numpy.core.multiarray.scalar``: a plain Python number when the dtype is a simple one."""
    value = dtype.decode(data) if isinstance(dtype, NumpyDtype) else None
    return value if value is not None else NumpyArray()


def _numpy_frombuffer(buf: Any, dtype: Any, shape: Any, order: Any = "C") -> NumpyArray:
    array = NumpyArray()
    array.shape = tuple(int(n) for n in shape)
    array.dtype = dtype
    array.nbytes = len(buf) if isinstance(buf, (bytes, bytearray)) else 0
    return array


class _StorageType:
    """What ``torch.FloatStorage`` and friends resolve to: only their dtype is ever used."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


class _Storage:
    """A storage rebuilt from a data record: a meta untyped storage of the record's size, plus its dtype."""

    def __init__(self, untyped: torch.UntypedStorage, dtype: torch.dtype) -> None:
        self.untyped = untyped
        self.dtype = dtype


class TorchGenerator(PickledObject):
    """A pickled ``torch.Generator``: its state tensor is kept (as ``state``) for the walk to recognise."""

    pickled_name = "torch._C.Generator"

    def __new__(cls, *args: Any, **kwargs: Any) -> "TorchGenerator":
        return dict.__new__(cls)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 3:
            self.update(seed=state[0], offset=state[1], state=state[2])


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """A meta tensor viewing ``storage`` as the pickle describes: exact sizes and sharing, no data."""
    if not isinstance(storage, _Storage):
        raise AuditError(f"a tensor record names {type(storage).__name__} as its storage")
    try:
        return torch.empty(0, dtype=dtype or storage.dtype, device="meta").set_(
            storage.untyped, int(offset), tuple(int(n) for n in size), tuple(int(n) for n in stride))
    except (RuntimeError, TypeError, ValueError) as exc:
        raise AuditError(f"a tensor record does not fit its storage: {str(exc).splitlines()[0]}") from None


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> torch.Tensor:
    return _tensor(storage, offset, size, stride)


def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       hooks: Any = None, dtype: Any = None, *rest: Any) -> torch.Tensor:
    return _tensor(storage, offset, size, stride, dtype if isinstance(dtype, torch.dtype) else None)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


def _rebuild_meta_tensor_no_storage(dtype: Any, size: Any, stride: Any, *rest: Any) -> torch.Tensor:
    return torch.empty_strided(tuple(int(n) for n in size), tuple(int(n) for n in stride),
                               dtype=dtype if isinstance(dtype, torch.dtype) else None, device="meta")


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    if func not in _REBUILDERS or not isinstance(args, tuple):
        raise AuditError("a tensor record rebuilds through an unexpected function")
    return func(*args)


def _latin1(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes: latin-1 text to bytes, nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise AuditError("the pickle calls _codecs.encode other than to make bytes")
    return text.encode("latin1")


class _Marker:
    """What ``torch.Tensor`` and ``Parameter`` resolve to: a name the pickle may pass but cannot call (to allocate)."""

    def __call__(self, *args: Any) -> Any:
        raise AuditError("the pickle calls a tensor constructor directly, which torch.save never writes")


_TENSOR_TYPE = _Marker()
_REBUILDERS = {_rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter, _rebuild_meta_tensor_no_storage}
_NUMPY = {
    "_reconstruct": lambda cls, shape, code: NumpyArray(), "ndarray": NumpyArray, "dtype": NumpyDtype,
    "scalar": _numpy_scalar, "_frombuffer": _numpy_frombuffer,
}
_ALLOWED: Dict[str, Any] = {
    "collections.OrderedDict": OrderedDict,
    "builtins.set": set, "builtins.frozenset": frozenset, "builtins.complex": complex, "builtins.slice": slice,
    "_codecs.encode": _latin1,
    "torch._utils._rebuild_tensor": _rebuild_tensor_v2, "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta_tensor_no_storage,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch._C.Generator": TorchGenerator, "torch.Generator": TorchGenerator,
    "torch.Size": torch.Size, "torch.device": torch.device,
    "torch.Tensor": _TENSOR_TYPE, "torch._tensor.Tensor": _TENSOR_TYPE, "torch.nn.parameter.Parameter": _TENSOR_TYPE,
    "torch.UntypedStorage": _StorageType(torch.uint8), "torch.storage.UntypedStorage": _StorageType(torch.uint8),
}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric", "numpy"):
    for _name, _impl in _NUMPY.items():
        _ALLOWED[f"{_module}.{_name}"] = _impl


def _torch_attribute(module: str, name: str) -> Any:
    """``torch.float32``, ``torch.strided``, ``torch.FloatStorage``: read, never called; None for anything else."""
    if module != "torch" or name.startswith("_"):
        return None
    value = getattr(torch, name, None)
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return value
    if name.endswith("Storage") and isinstance(value, type) and issubclass(value, torch.storage.TypedStorage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reading a legacy storage class's dtype warns that TypedStorage is deprecated
            return _StorageType(value.dtype)
    return None


class _Unpickler(pickle.Unpickler):
    """Unpickles with an allowlist; every other global becomes a recording placeholder class."""

    def __init__(self, file: Any, load_storage: Optional[Callable[[tuple], _Storage]], log: "PickleLog",
                 limit: int) -> None:
        super().__init__(file)
        self._load_storage = load_storage
        self._log = log
        self._limit = limit

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        qualname = f"{module}.{name}"
        self._log.named(qualname)
        allowed = _ALLOWED.get(qualname)
        if allowed is None:
            allowed = _torch_attribute(module, name)
        if allowed is not None:
            return allowed
        if qualname == "torch.storage._load_from_bytes":
            return lambda data: _load_bytes(data, self._log, self._limit)
        return self._log.placeholder(qualname)

    def persistent_load(self, pid: Any) -> Any:
        if self._load_storage is None or not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise AuditError(f"the pickle refers to an object outside it ({pid!r:.80}) that this format does not have")
        return self._load_storage(pid)


class _Reader:
    """The stream an unpickler reads: no more than ``limit`` bytes in all and nothing past ``end``, so a record
    that claims gigabytes costs what the data really holds. ``peek`` lets the C unpickler read ahead in chunks."""

    def __init__(self, stream: Any, end: int, limit: int) -> None:
        self._stream, self._end, self._left, self._limit = stream, end, limit, limit

    def _room(self, n: Optional[int]) -> int:
        left = max(0, self._end - self._stream.tell())
        if n is not None and n > self._left:
            raise _claims_too_much(self._limit)
        return left if n is None or n < 0 else min(n, left)

    def peek(self, n: int = 1) -> bytes:
        at = self._stream.tell()
        data = self._stream.read(min(self._room(None), max(n, 1), self._left))
        self._stream.seek(at)
        return data

    def read(self, n: Optional[int] = -1) -> bytes:
        data = self._stream.read(self._room(n))
        self._left -= len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, n: Optional[int] = -1) -> bytes:
        data = self._stream.readline(min(self._room(n), self._left + 1))
        self._left -= len(data)
        if self._left < 0:
            raise _claims_too_much(self._limit)
        return data


_PREALLOCATED = re.compile(rb"[\x8e\x96]")
"""BINBYTES8 and BYTEARRAY8: the C unpickler allocates the length they claim before it reads a byte."""


def _check_claims(stream: Any, end: int, limit: int) -> None:
    """Refuse a BINBYTES8 or BYTEARRAY8 record that claims more than ``limit`` or than the data holds, before the
    C unpickler allocates it. Bytes that look like one are searched for first; only where one claims too much are
    the opcodes walked (by pickletools, through a :class:`_Reader`) to tell a real record from data."""
    start = stream.tell()
    stop = min(end, start + limit)
    suspect, at = False, start
    while at < stop and not suspect:
        chunk = stream.read(min(_CHUNK, stop - at) + 8)
        for match in _PREALLOCATED.finditer(chunk, 0, max(0, len(chunk) - 8)):
            (claim,) = struct.unpack_from("<Q", chunk, match.end())
            suspect = suspect or claim > min(limit, end - (at + match.end() + 8))
        at += _CHUNK
        stream.seek(at)
    stream.seek(start)
    if suspect:
        try:
            for _ in pickletools.genops(_Reader(stream, end, limit)):
                pass
        except ValueError as exc:
            raise AuditError(f"not a readable pickle ({exc}): torn, damaged or not a checkpoint") from None
        finally:
            stream.seek(start)


def _unpickle(stream: Any, end: int, load_storage: Optional[Callable[[tuple], _Storage]], log: "PickleLog",
              limit: int) -> Any:
    """One pickle from ``stream`` (which ends at ``end``), read within ``limit`` bytes."""
    _check_claims(stream, end, limit)
    return _Unpickler(_Reader(stream, end, limit), load_storage, log, limit).load()


class PickleLog:
    """Names the pickle asked for outside the allowlist, and the calls it would have made.

    Bounded whatever the pickle does: at most :data:`NAMES_MAX` names, and per callable a count of its calls
    with the arguments of the first :data:`CALLS_SHOWN` only."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.globals: set = set()
        """Every global the pickle named, allowlisted or not."""
        self.calls: Dict[str, List[tuple]] = {}
        """Per placeholder name, the arguments of its first calls."""
        self.call_counts: Dict[str, int] = {}
        self._classes: Dict[str, type] = {}

    def named(self, qualname: str) -> None:
        """Note a global the pickle names; past :data:`NAMES_MAX` distinct ones the file is no checkpoint."""
        if qualname not in self.globals and len(self.globals) >= NAMES_MAX:
            raise AuditError(f"the pickle names more than {NAMES_MAX} distinct globals (a checkpoint names a few dozen)")
        self.globals.add(qualname)

    def placeholder(self, qualname: str) -> type:
        if qualname not in self._classes:
            self.names.append(qualname)
            self._classes[qualname] = type(qualname, (PickledObject,), {"pickled_name": qualname, "log": self})
        return self._classes[qualname]

    def called(self, qualname: str, args: tuple) -> None:
        count = self.call_counts.get(qualname, 0)
        self.call_counts[qualname] = count + 1
        if count < CALLS_SHOWN:
            self.calls.setdefault(qualname, []).append(args)

    def beyond_weights_only(self) -> List[str]:
        """Globals that ``torch.load(weights_only=True)`` refuses by default: numpy's and every placeholder."""
        return sorted(n for n in self.globals if n in self.names or n.split(".")[0] == "numpy")

    def _shown_calls(self, names: List[str]) -> List[str]:
        shown = []
        for name in names:
            shown += [f"{name}({', '.join(_short(a) for a in args)})" for args in self.calls.get(name, ())]
            more = self.call_counts.get(name, 0) - CALLS_SHOWN
            if more > 0:
                shown.append(f"{name} called {more} more times")
        return shown

    def findings(self) -> List[Dict[str, Any]]:
        """``unsafe-pickle`` for every name outside the allowlist and :data:`KNOWN_OBJECTS` (those known to run
        commands first), ``pickled-objects`` for known objects that ``weights_only=True`` refuses."""
        out = []
        dangerous = [n for n in self.names if is_dangerous(n)]
        unknown = [n for n in self.names if n not in dangerous and not is_known_object(n)]
        unsafe = dangerous + unknown
        if unsafe:
            shown = self._shown_calls(unsafe)
            what = "; ".join(_first(shown or unsafe))
            why = ("its pickle calls code that can run commands; chaosckpt did not run it. Do not torch.load it with "
                   "weights_only=False" if dangerous else
                   "its pickle calls code that audit does not know as data (docs/audit.md lists what it knows), and "
                   "such code can run commands; chaosckpt did not run it. Do not torch.load it with "
                   "weights_only=False unless you trust who wrote it")
            out.append({"kind": "unsafe-pickle", "callables": unsafe[:NAMES_SHOWN], "calls": shown[:NAMES_SHOWN],
                        "message": f"loading this file runs {what}: {why}"})
        others = [n for n in self.names if n not in unsafe]
        if others:
            out.append({"kind": "pickled-objects", "names": others[:NAMES_SHOWN], "message": (
                f"the checkpoint pickles objects of {', '.join(_first(others))}: torch.load(weights_only=True), the "
                "default since torch 2.6, refuses it, and weights_only=False runs their code; save plain values "
                "(dicts, numbers, strings, tensors) instead (chaosckpt did not import or run them)")})
        return out


def _first(items: List[str]) -> List[str]:
    """The first :data:`NAMES_SHOWN` items, and a count of the rest."""
    return items[:NAMES_SHOWN] + ([f"and {len(items) - NAMES_SHOWN} more"] if len(items) > NAMES_SHOWN else [])


SHORT = 80
"""Characters one argument of a call takes in a finding."""


def _short(value: Any) -> str:
    """An argument of a call as the finding shows it, within :data:`SHORT` characters. Built from the first few
    items of containers and the head of strings, never by ``repr`` of the whole: a pickle can share one list so
    that its repr is gigabytes, or make an integer of millions of digits."""
    parts: List[str] = []
    _describe(value, parts, 0)
    text = "".join(parts)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."


_BRACKETS = {list: "[]", tuple: "()", set: "{}", frozenset: "{}"}


def _describe(value: Any, parts: List[str], depth: int) -> None:
    """Append ``value``'s short form to ``parts``, stopping once they hold more than :data:`SHORT` characters."""
    if sum(map(len, parts)) > SHORT:
        return
    if isinstance(value, PickledObject):
        parts.append(f"<{value.pickled_name}>")
    elif isinstance(value, (str, bytes, bytearray)):
        parts.append(repr(value[:SHORT]))
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        parts.append(f"<a {value.bit_length()}-bit integer>")
    elif value is None or isinstance(value, (bool, int, float, complex)):
        parts.append(repr(value))
    elif type(value) in _BRACKETS or isinstance(value, dict):
        pairs = isinstance(value, dict)
        opening, closing = "{}" if pairs else _BRACKETS[type(value)]
        parts.append(opening)
        if depth >= 3:
            parts += ["...", closing]
            return
        for index, item in enumerate(value.items() if pairs else value):
            if index and sum(map(len, parts)) > SHORT:
                break
            parts.append(", " if index else "")
            _describe(item[0] if pairs else item, parts, depth + 1)
            if pairs:
                parts.append(": ")
                _describe(item[1], parts, depth + 1)
        parts.append(closing)
    else:
        parts.append(f"<{type(value).__name__}>")


class Loaded:
    """A checkpoint rebuilt without running it: the object, its format, and what the pickle asked for."""

    def __init__(self, obj: Any, fmt: str, log: PickleLog) -> None:
        self.obj = obj
        self.format = fmt
        self.log = log


def _too_large(name: str, limit: int) -> AuditError:
    return AuditError(f"record {name} inflates to more than {limit} bytes: a zip bomb, or not a torch.save "
                      "checkpoint (torch never compresses); raise the limit with --max-inflate if you trust the file")


def _claims_too_much(limit: int) -> AuditError:
    return AuditError(f"the pickle claims more than {limit} bytes: a memory bomb, or not a checkpoint; raise the "
                      "limit with --max-inflate if you trust the file")


class _Capped:
    """A record's stream that refuses to inflate past ``limit`` bytes, so a zip bomb costs no more than that."""

    def __init__(self, stream: Any, limit: int, name: str) -> None:
        self.stream = stream
        self.limit = limit
        self.name = name
        self.count = 0

    def _check(self, data: bytes) -> bytes:
        self.count += len(data)
        if self.count > self.limit:
            raise _too_large(self.name, self.limit)
        return data

    def _room(self, n: Optional[int]) -> int:
        left = self.limit - self.count + 1
        return left if n is None or n < 0 else min(n, left)

    def read(self, n: Optional[int] = -1) -> bytes:
        return self._check(self.stream.read(self._room(n)))

    def readline(self, n: Optional[int] = -1) -> bytes:
        return self._check(self.stream.readline(self._room(n)))


def _open_record(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> _Capped:
    if info.file_size > limit:  # as the archive declares it; ``_Capped`` holds a record that lies to the limit too
        raise _too_large(info.filename, limit)
    return _Capped(archive.open(info), limit, info.filename)


def _crc_ok(handle: Any, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bool:
    """Whether a record's bytes match the CRC in the archive, read in chunks (no record is held whole)."""
    if info.compress_type != zipfile.ZIP_STORED:
        stream = _open_record(archive, info, limit)
        try:
            while stream.read(_CHUNK):
                pass
        except (zipfile.BadZipFile, zlib.error, EOFError):
            return False
        finally:
            stream.stream.close()
        return True
    handle.seek(info.header_offset)
    header = handle.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        return False
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    handle.seek(info.header_offset + 30 + name_len + extra_len)
    crc, left = 0, info.file_size
    while left:
        chunk = handle.read(min(left, _CHUNK))
        if not chunk:
            return False
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    return crc == info.CRC


_DOS_FOLDER = 0x10
_UNREADABLE_FLAGS = 0x1 | 0x40 | 0x2000
"""Encrypted, strongly encrypted, masked local headers: torch's reader refuses a record flagged so."""
_TEXT_RECORDS = {"version": re.compile(rb"\d+\n?"), ".format_version": re.compile(rb"\d+\n?"),
                 ".storage_alignment": re.compile(rb"\d+\n?"), "byteorder": re.compile(rb"little|big")}
"""Records torch reads as text before the pickle, and what it can parse in them."""


def _check_records(handle: Any, archive: zipfile.ZipFile, prefix: str, limit: int) -> None:
    """What torch's zip reader checks and Python's zipfile does not: every record's CRC (not only the pickle's,
    which zipfile checks as it reads it), its flags, method and disk, the text records torch parses, and the
    disk numbers and counts of the archive's end records."""
    for info in archive.infolist():
        why = ("it is flagged encrypted" if info.flag_bits & _UNREADABLE_FLAGS
               else "an unknown compression method" if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
               else "it claims to be on another disk" if info.volume
               else "it is marked as a folder" if info.external_attr & _DOS_FOLDER
               else "its stored and original sizes differ" if info.compress_type == zipfile.ZIP_STORED
               and info.compress_size != info.file_size
               else "its bytes do not match the archive's CRC" if not _crc_ok(handle, archive, info, limit)
               else None)
        if why:
            raise AuditError(f"record {info.filename} is damaged ({why})")
        pattern = _TEXT_RECORDS.get(info.filename[len(prefix):])
        if pattern is not None and info.file_size <= 64:
            with archive.open(info) as record:
                if not pattern.fullmatch(record.read()):
                    raise AuditError(f"record {info.filename} is damaged (torch cannot parse what it holds)")
    if f"{prefix}version" not in archive.NameToInfo:
        raise AuditError(f"damaged zip archive: no {prefix}version record, which torch.save always writes")
    _check_ends(handle, len(archive.infolist()), _central_bytes(handle, archive))


def _central_bytes(handle: Any, archive: zipfile.ZipFile) -> int:
    """How many bytes the central directory's entries take by their own length fields (zipfile reads past a
    length that runs off the directory's end without complaint; torch's reader refuses it)."""
    handle.seek(archive.start_dir)
    total = 0
    for _ in archive.infolist():
        entry = handle.read(46)
        if len(entry) != 46:
            break
        names, extra, comment = struct.unpack("<HHH", entry[28:34])
        total += 46 + names + extra + comment
        handle.seek(names + extra + comment, os.SEEK_CUR)
    return total


def _check_ends(handle: Any, count: int, listed: int) -> None:
    """The end-of-archive records (zip64 and plain, as torch writes them: no comment) describe one disk,
    as many records as the central directory holds, and as many bytes as its entries take (``listed``)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - 42))
    tail = handle.read(42)
    end, locator = tail[-22:], tail[:20]
    if len(tail) < 42 or end[:4] != b"PK\x05\x06":
        return
    disk, cd_disk, here, total, cd_size = struct.unpack("<HHHHI", end[4:16])
    if disk or cd_disk or here != total or total not in (count, 0xFFFF) or cd_size not in (listed, 0xFFFFFFFF):
        raise AuditError("damaged zip archive: its end record describes another disk, or more or fewer records "
                         "than its central directory holds")
    if locator[:4] != b"PK\x06\x07":
        return
    (offset,) = struct.unpack("<Q", locator[8:16])
    handle.seek(min(offset, size))
    end64 = handle.read(56)
    if len(end64) != 56 or end64[:4] != b"PK\x06\x06":
        raise AuditError("damaged zip archive: its zip64 end record is not where the locator says")
    disk64, cd_disk64, here64, total64, cd_size64 = struct.unpack("<IIQQQ", end64[16:48])
    if disk64 or cd_disk64 or here64 != total64 or total64 != count or cd_size64 != listed:
        raise AuditError("damaged zip archive: its zip64 end record describes another disk, or more or fewer "
                         "records than its central directory holds")


def _load_zip(handle: Any, log: PickleLog, limit: int) -> Loaded:
    try:
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as exc:
        raise AuditError(f"torn: a zip archive without its end (the central directory, which torch.save writes "
                         f"last), so the save that wrote it never finished (zipfile: {exc})") from None
    with archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise AuditError("a zip archive, but not a torch.save checkpoint (no single <name>/data.pkl record)")
        prefix = pickles[0][: -len("data.pkl")]
        if f"{prefix}constants.pkl" in names or any(n.startswith(f"{prefix}code/") for n in names):
            raise AuditError("a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
        records = {info.filename: info for info in archive.infolist()}
        storages: Dict[str, _Storage] = {}

        def load_storage(pid: tuple) -> _Storage:
            if len(pid) < 5 or not isinstance(pid[1], _StorageType):
                raise AuditError(f"unexpected storage record {pid!r:.80}")
            key = str(pid[2])
            if key not in storages:
                info = records.get(f"{prefix}data/{key}")
                if info is None:
                    raise AuditError(f"the pickle names storage {key}, but the archive has no record {prefix}data/{key}")
                storages[key] = _Storage(torch.UntypedStorage(info.file_size, device="meta"), pid[1].dtype)
            return storages[key]

        try:
            stream = _open_record(archive, records[pickles[0]], limit)
            try:
                data = stream.read()  # within the limit; whole, since the unpickler reads it in small bites
            finally:
                stream.stream.close()
            obj = _unpickle(io.BytesIO(data), len(data), load_storage, log, limit)
            _check_records(handle, archive, prefix, limit)
        except zipfile.BadZipFile as exc:
            raise AuditError(f"damaged zip archive: {exc}") from None
    return Loaded(obj, "torch zip archive", log)


def _load_pickles(stream: Any, size: int, log: PickleLog, limit: int) -> Loaded:
    """A legacy torch file (magic, version, system info, object, storage keys, raw storages) or a plain pickle."""
    first = _unpickle(stream, size, None, log, limit)
    if not (type(first) is int and first == LEGACY_MAGIC):
        return Loaded(first, "pickle", log)
    _unpickle(stream, size, None, log, limit)
    _unpickle(stream, size, None, log, limit)
    storages: Dict[str, _Storage] = {}

    def load_storage(pid: tuple) -> _Storage:
        if len(pid) < 5 or not isinstance(pid[1], _StorageType):
            raise AuditError(f"unexpected storage record {pid!r:.80}")
        key, dtype = str(pid[2]), pid[1].dtype
        if key not in storages:
            storages[key] = _Storage(torch.UntypedStorage(int(pid[4]) * dtype.itemsize, device="meta"), dtype)
        return storages[key]

    obj = _unpickle(stream, size, load_storage, log, limit)
    keys = _unpickle(stream, size, None, log, limit)
    if not isinstance(keys, list):
        raise AuditError("legacy torch file without its list of storages")
    for key in keys:
        header = stream.read(8)
        if len(header) != 8:
            raise AuditError(f"torn: the file ends before the data of storage {key}")
        stored = storages.get(str(key))
        nbytes = struct.unpack("<q", header)[0] * (stored.dtype.itemsize if stored else 1)
        left = size - stream.tell()
        if nbytes > left:
            raise AuditError(f"torn: storage {key} needs {nbytes} bytes, the file ends {left} bytes on")
        stream.seek(nbytes, os.SEEK_CUR)
    return Loaded(obj, "legacy torch file", log)


def _load_bytes(data: Any, log: PickleLog, limit: int) -> Any:
    """``torch.storage._load_from_bytes`` in plain pickles of tensors: the bytes are a torch file, read the same way."""
    if not isinstance(data, (bytes, bytearray)):
        raise AuditError("torch.storage._load_from_bytes called without bytes")
    stream = io.BytesIO(bytes(data))
    loaded = _load_zip(stream, log, limit) if data[:2] == b"PK" else _load_pickles(stream, len(data), log, limit)
    return loaded.obj


@contextlib.contextmanager
def _judged() -> Iterator[None]:
    """Whatever reading a file raises becomes one :class:`AuditError` line: unreadable means torn or damaged."""
    try:
        yield
    except AuditError:
        raise
    except OSError as exc:
        raise AuditError(f"cannot read it: {exc.strerror or exc}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RuntimeError, struct.error, RecursionError, zipfile.BadZipFile) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else "the data ends early"
        raise AuditError(f"not a readable pickle ({type(exc).__name__}: {detail}): torn, damaged or not a checkpoint") from None


class _Window:
    """``length`` bytes of an open file from ``offset``, as a file of its own: one record of a DCP shard."""

    def __init__(self, handle: BinaryIO, offset: int, length: int) -> None:
        self._handle, self._offset, self._length, self._at = handle, offset, length, 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, where: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._at, os.SEEK_END: self._length}[whence]
        self._at = max(0, base + where)
        return self._at

    def read(self, n: Optional[int] = -1) -> bytes:
        left = max(0, self._length - self._at)
        n = left if n is None or n < 0 else min(n, left)
        self._handle.seek(self._offset + self._at)
        data = self._handle.read(n)
        self._at += len(data)
        return data


def load_record(handle: BinaryIO, offset: int, length: int, log: PickleLog, limit: int) -> Loaded:
    """A ``torch.save`` archive stored at ``offset`` in a larger file (a record of a DCP shard), judged as a file
    of its own: structure, allowlisted pickle, CRCs; :class:`AuditError` when it cannot be read."""
    window = _Window(handle, offset, length)
    with _judged():
        if window.read(2) != b"PK":
            raise AuditError("not a torch.save archive (it does not start with a zip header)")
        window.seek(0)
        return _load_zip(window, log, limit)


def scalar(handle: BinaryIO, offset: int, length: int, dtype: torch.dtype) -> Optional[int]:
    """The value of a one-element integer tensor saved at ``offset`` (a DCP ``step``), or None: at most 8 bytes read."""
    fmt = {torch.int64: "<q", torch.int32: "<i", torch.int16: "<h", torch.int8: "<b", torch.uint8: "<B"}.get(dtype)
    if fmt is None:
        return None
    try:
        with zipfile.ZipFile(_Window(handle, offset, length)) as archive:
            data = [i for i in archive.infolist() if i.filename.endswith("/data/0")]
            if len(data) != 1 or data[0].file_size != struct.calcsize(fmt):
                return None
            with archive.open(data[0]) as record:
                return int(struct.unpack(fmt, record.read(struct.calcsize(fmt)))[0])
    except (OSError, zipfile.BadZipFile, struct.error, ValueError, EOFError):
        return None


def is_safetensors(path: Union[str, Path], head: bytes) -> bool:
    """By its name, or by a JSON object after the 8-byte length (a zip starts ``PK``, a pickle ``\\x80``)."""
    return str(path).endswith(".safetensors") or (head[8:9] == b"{" and head[:1] != b"\x80" and head[:2] != b"PK")


def open_regular(path: Union[str, Path]) -> BinaryIO:
    """Open a file for reading without blocking on a FIFO, refusing anything that is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AuditError("not a regular file (a FIFO, socket or device), so no checkpoint")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_PICKLE_STARTS = frozenset(op.code for op in pickletools.opcodes
                           if op.proto < 2 and op.stack_before == [] and op.code not in "ghjpqrP") | {"\x80"}
"""First bytes of a pickle: PROTO, or (protocols 0 and 1, which torch.load(weights_only=False) runs just the
same) any opcode that can start one."""


def load(path: Union[str, Path], max_inflate: Optional[int] = None, log: Optional[PickleLog] = None) -> Loaded:
    """Rebuild a checkpoint file's object without running any of it; :class:`AuditError` if it cannot be read.

    The one judge of whether a file loads, for ``audit`` and the sweep: torch files, pickles, and safetensors
    files (from their header: tensors come back as meta tensors). No record is inflated past ``max_inflate``
    bytes (default: ``inflate_limit`` of the file's size). ``log`` collects the names the pickle asked for,
    also when it turns out unreadable.
    """
    log = log if log is not None else PickleLog()
    with _judged(), open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        limit = max_inflate or inflate_limit(size)
        head = handle.read(9)
        handle.seek(0)
        if size == 0:
            raise AuditError("empty file (0 bytes)")
        if head.startswith(b"PK") and not str(path).endswith(".safetensors"):
            return _load_zip(handle, log, limit)
        if is_safetensors(path, head):
            try:
                return Loaded(safetensors_header.read(handle, size), "safetensors", log)
            except safetensors_header.HeaderError as exc:
                raise AuditError(str(exc)) from None
        if chr(head[0]) not in _PICKLE_STARTS:
            raise AuditError("neither a torch checkpoint, a pickle nor a safetensors file (unrecognised first bytes)")
        return _load_pickles(handle, size, log, limit)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cycle collector off while a pickle is rebuilt and walked: a million nested containers would have it
    rescan every live object again and again, making the time grow faster than the size."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def audit_file(path: Union[str, Path], *, streams: Union[int, Sequence[str], None] = None,
               max_inflate: Optional[int] = None, training: Optional[bool] = None,
               shown: Optional[str] = None) -> Dict[str, Any]:
    """Audit one file: ``{"path", "bytes", "file_format", "contents", "findings"}`` (contents None when unreadable).

    What the pickle asked for outside the allowlist is reported even when the file cannot be read whole: a call
    that would fail is no safer for it. ``training``: the file is meant to resume training from (None: when it
    carries optimizer state). ``shown``: the path as the report names it (default: ``path``)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # load() says why it cannot read the file
    name = shown if shown is not None else str(path)
    log = PickleLog()
    with _no_gc():
        try:
            loaded = load(path, max_inflate, log)
        except AuditError as exc:
            return {"path": name, "bytes": size, "file_format": None, "contents": None,
                    "findings": log.findings() + [{"kind": "unreadable-checkpoint", "message": f"cannot be loaded: {exc}",
                                                   "error": str(exc)}]}
        result = checkpoint_content.analyse(loaded.obj, streams=streams, training=training)
    contents = result["contents"]
    if training or (training is None and contents["optimizer_states"]):
        contents["training_state"] = checkpoint_content.training_state(contents)
    return {"path": name, "bytes": size, "file_format": loaded.format, "contents": result["contents"],
            "findings": loaded.log.findings() + result["findings"]}
