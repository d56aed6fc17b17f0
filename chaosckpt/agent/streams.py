"""Every random stream the job can draw from, each named by where it is held.

Process-wide streams (torch's default CPU generator, Python's ``random``, numpy's
global state, each CUDA device) are always there. Private ones are found by a
scan of the objects the garbage collector tracks: ``torch.Generator``,
``random.Random`` and ``numpy.random.Generator`` instances held in an object's
attributes or a module's globals. The scan costs a few hundred milliseconds on a
large program, so it runs once, at the first step of each process.
"""

from __future__ import annotations

import gc
import random
import sys
import warnings
import zlib
from typing import Any, Dict, List, Tuple

import torch

from chaosckpt.agent.fingerprint import crc_of_tensor, python_random, rng_fingerprints

MAX_PRIVATE = 32
"""At most this many private streams are followed; a job with more is unusual and the rest are ignored."""


def _generator_types() -> Tuple[type, ...]:
    """The classes a stream's state lives in: one ``isinstance`` against them skips the heap's other values."""
    np = sys.modules.get("numpy")
    return (torch.Generator, random.Random) + ((np.random.Generator,) if np is not None else ())


def _kind(value: Any) -> str:
    kind = type(value)
    if issubclass(kind, torch.Generator):
        return "torch.Generator"
    if issubclass(kind, random.Random) and value is not getattr(random, "_inst", None):
        return "random.Random"
    np = sys.modules.get("numpy")
    if np is not None and issubclass(kind, np.random.Generator):
        return "numpy Generator"
    return ""


_NO_ATTRIBUTES = frozenset({
    dict, list, tuple, set, frozenset, type(sys), type(_kind), type(len), type(print.__call__), type(_kind.__code__),
    type((lambda: 0).__closure__ or (lambda x=0: (lambda: x))().__closure__[0]), property, staticmethod, classmethod,
    type(object.__init__), type(str.join), type(dict.__dict__["fromkeys"]), type(sys._getframe()),
})
"""Types that make up most of the heap and never hold a generator as an attribute: skipped by the scan."""


_NAMING = frozenset({"_RandomNameSequence"})
"""Holders of a stream that only picks file names (``tempfile``'s, drawn from by a save through a temporary
file): the training loop never draws from it."""


def _holders() -> List[Tuple[str, Dict[str, Any]]]:
    """(name, namespace) pairs: the main script's globals, then every instance's ``__dict__``."""
    out = []
    main = sys.modules.get("__main__")
    if main is not None:
        out.append((f"{getattr(main, '__file__', '__main__').rsplit('/', 1)[-1]} globals", vars(main)))
    with warnings.catch_warnings():  # touching odd objects (deprecated aliases) must not print into the job's output
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            kind = type(obj)
            if kind in _NO_ATTRIBUTES or issubclass(kind, type) or kind.__name__ in _NAMING:
                continue
            try:
                namespace = object.__getattribute__(obj, "__dict__")
            except (AttributeError, TypeError):
                continue
            if isinstance(namespace, dict) and namespace:
                out.append((kind.__name__, namespace))
    return out


def find_private() -> Tuple[Dict[str, Any], Dict[str, List[str]]]:
    """Private generators by one name each (``torch.Generator at DataLoader.generator``), and their aliases.

    A generator held in several places (the job's ``loader_gen``, ``DataLoader.generator``,
    ``RandomSampler.generator``) is named by its shortest holder path; the others are its aliases.
    """
    names: Dict[int, List[str]] = {}
    objects: Dict[int, Any] = {}
    generators = _generator_types()
    for holder, namespace in _holders():
        for attr, value in list(namespace.items()):
            kind = _kind(value) if isinstance(value, generators) else ""
            if kind:
                names.setdefault(id(value), []).append(f"{kind} at {holder}.{attr}" if not holder.endswith("globals")
                                                       else f"{kind} `{attr}` ({holder})")
                objects[id(value)] = value
    found: Dict[str, Any] = {}
    aliases: Dict[str, List[str]] = {}
    for key, labels in sorted(names.items(), key=lambda kv: min(kv[1], key=_shortest)):
        name, *others = sorted(set(labels), key=_shortest)
        found[name] = objects[key]
        if others:
            aliases[name] = others
        if len(found) >= MAX_PRIVATE:
            break
    return found, aliases


def _shortest(label: str) -> Tuple[int, str]:
    return len(label), label


def fingerprint(value: Any) -> str:
    if isinstance(value, torch.Generator):
        return f"{crc_of_tensor(value.get_state()):08x}"
    if isinstance(value, random.Random):
        return python_random(value.getstate())
    state = value.bit_generator.state
    return f"{zlib.crc32(repr(state).encode()):08x}"


class Streams:
    """The streams followed in this process and their fingerprints at each step."""

    def __init__(self) -> None:
        self.private: Dict[str, Any] = {}
        self.aliases: Dict[str, List[str]] = {}

    def rescan(self) -> None:
        self.private, self.aliases = find_private()

    def fingerprints(self) -> Dict[str, str]:
        fps = rng_fingerprints()
        for name, value in self.private.items():
            try:
                fps[name] = fingerprint(value)
            except Exception:  # a generator on a device that went away: stop following it
                continue
        return fps
