"""Which rows each DataLoader pass handed out, in which order, at which sampler epoch.

The patch sits on the DataLoader iterator's index fetch (``_next_index``), so it
sees every sampler a DataLoader uses, DistributedSampler or not, at one Python
call per batch rather than per index. A pass ends with one ``sampler`` event
when its sampler is exhausted, or, abandoned, when its iterator is collected or
the process exits. Indices are stored as an exact order CRC plus either the list
itself (small passes) or a bitmap of the indices seen and their repeats, which
is all the conductor needs for coverage and order checks (see ``encode``).

In a resume run the conductor can also skew ``DistributedSampler.set_epoch``
through ``CHAOSCKPT_SAMPLER_SKEW`` (see ``install_skew``).
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import json
import os
import weakref
import zlib
from array import array
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from chaosckpt import protocol
from chaosckpt.agent import patches

SMALL = 1024
"""Passes of at most this many indices carry the list itself; larger ones a bitmap."""
HEAD = 8
"""Leading indices kept as evidence when the list itself is not stored."""
MAX_DUPS = 1000
"""At most this many repeated indices are listed per pass."""
FLUSH = 64
"""Batches kept as Python lists before they are packed into int64s, bounding a pass's memory."""
_UNREAD = object()

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    return bytes((ctypes.c_char * t.numel()).from_address(t.data_ptr())) if t.numel() else b""


def encode(indices: array) -> Dict[str, Any]:
    """The compact record of one pass's indices (an ``array('q')``), as event fields.

    ``n`` and ``crc`` (CRC-32 of the little-endian int64 list: equal CRCs mean the
    same order) always; then ``indices`` (the list) for up to ``SMALL`` indices,
    else ``bits`` (base64 of a zlib-compressed little-endian bitmap over
    0..max), ``dups`` ({index: extra reads}) and ``head``. About 25 ms per
    million indices on one core, as much again as packing Python ints into int64s.
    """
    fields: Dict[str, Any] = {"n": len(indices), "crc": f"{zlib.crc32(indices):08x}"}
    if len(indices) <= SMALL:
        fields["indices"] = indices.tolist()
        return fields
    fields["head"] = indices[:HEAD].tolist()
    t = torch.frombuffer(indices, dtype=torch.int64)
    if int(t.min()) < 0:
        return fields
    present = torch.zeros(int(t.max()) + 1, dtype=torch.bool, device="cpu").index_fill_(0, t, True)
    repeats = len(indices) - int(present.sum())
    dups: Dict[str, int] = {}
    if repeats:
        counts = torch.bincount(t).cpu()
        for i in (counts > 1).nonzero().flatten()[:MAX_DUPS].tolist():
            dups[str(i)] = int(counts[i]) - 1
    padded = torch.nn.functional.pad(present.to(torch.uint8), (0, -present.numel() % 8))
    packed = (padded.view(-1, 8) * _BIT_WEIGHTS).sum(1, dtype=torch.uint8)
    fields["bits"] = base64.b64encode(zlib.compress(_tensor_bytes(packed), 1)).decode()
    fields["dups"] = dups
    return fields


def _flatten(items: List[Any]) -> Optional[array]:
    """The indices of a pass as int64s, whether the sampler yielded them one by one or in batches."""
    try:
        if items and isinstance(items[0], (list, tuple)):
            return array("q", list(itertools.chain.from_iterable(items)))
        return array("q", items)
    except (TypeError, OverflowError):
        return None


def batch_crc(index: Any) -> Optional[str]:
    """CRC-32 of a batch's dataset indices as int64s (one index or a list of them); None when they are not integers."""
    flat = _flatten([index] if isinstance(index, (list, tuple)) else [[index]])
    return None if flat is None else f"{zlib.crc32(flat):08x}"


def _plain(value: Any, kind: type) -> Any:
    """``value`` as a JSON-ready int or bool (samplers may hold numpy scalars), or None."""
    try:
        return None if value is None else kind(value)
    except (TypeError, ValueError):
        return None


def _size(sampler: Any) -> Optional[int]:
    source = getattr(sampler, "dataset", None)
    if source is None:
        source = getattr(sampler, "data_source", None)
    try:
        return len(source) if source is not None else None
    except TypeError:
        return None


class Pass:
    """One iteration of a DataLoader's sampler, collecting what it yields."""

    __slots__ = ("source", "sampler", "step", "items", "packed", "epoch", "closed", "__weakref__")

    def __init__(self, source: Any, index_sampler: Any, step: int) -> None:
        self.source = source
        self.sampler = getattr(index_sampler, "sampler", index_sampler)
        self.step = step
        self.items: List[Any] = []
        self.packed: Optional[array] = array("q")
        self.epoch: Any = _UNREAD
        self.closed = False

    def pack(self) -> None:
        """Move the batches collected so far into ``packed``; indices that are not integers make it None."""
        flat = _flatten(self.items) if self.packed is not None else None
        if flat is None:
            self.packed = None
        else:
            self.packed.extend(flat)
        self.items = []

    def close(self, rec: Any, complete: bool) -> None:
        """Emit this pass's ``sampler`` event, once; a failure to describe the pass never reaches the job."""
        if self.closed or not rec.enabled:
            return
        self.closed = True
        try:
            self._emit(rec, complete)
        except Exception:
            self.packed = None

    def _emit(self, rec: Any, complete: bool) -> None:
        sampler = self.sampler
        epoch = self.epoch
        self.pack()
        fields = encode(self.packed) if self.packed is not None else {"n": None, "crc": None}
        rec.emit(
            "sampler",
            rank=rec.rank,
            sampler=type(sampler).__name__,
            size=_size(sampler),
            replicas=_plain(getattr(sampler, "num_replicas", None), int),
            srank=_plain(getattr(sampler, "rank", None), int),
            shuffle=_plain(getattr(sampler, "shuffle", None), bool),
            epoch=epoch if isinstance(epoch, int) else None,
            step=self.step,
            complete=complete,
            **fields,
        )
        self.packed = None


def install(rec: Any) -> None:
    """Record every DataLoader pass into ``rec``, and apply any epoch skew the conductor armed."""
    patches.install("sampler", rec)
    install_skew(rec.rank)


def next_index(rec: Any, original: Callable) -> Callable:
    """``_BaseDataLoaderIter._next_index``: each index a map-style loader draws joins its pass's record."""
    from torch.utils.data import dataloader

    map_style = dataloader._DatasetKind.Map

    def _next_index(self):
        rec.on_batch()
        if self._dataset_kind != map_style:
            return original(self)
        it = self._sampler_iter
        tape = self.__dict__.get("_chaosckpt_pass")
        if tape is None or tape.source is not it:
            if tape is not None:
                tape.close(rec, False)
            tape = Pass(it, self._index_sampler, rec.step)
            self.__dict__["_chaosckpt_pass"] = tape
            weakref.finalize(self, tape.close, rec, False)
        try:
            index = original(self)
        except StopIteration:
            tape.close(rec, True)
            raise
        if tape.epoch is _UNREAD:
            tape.epoch = getattr(tape.sampler, "epoch", None)
        rec.on_indices(batch_crc(index))
        tape.items.append(index)
        if len(tape.items) >= FLUSH:
            tape.pack()
        return index

    return _next_index


def install_skew(rank: Optional[int]) -> None:
    """Shift ``DistributedSampler.set_epoch`` as ``CHAOSCKPT_SAMPLER_SKEW`` says, in the ranks it names.

    ``{"variant": "offset", "offset": d, "rank": r}`` adds d to every epoch rank r sets;
    ``{"variant": "reset"}`` makes every rank's first epoch 0 and counts on from there.
    """
    spec = os.environ.get(protocol.ENV_SAMPLER_SKEW)
    if not spec:
        return
    skew = json.loads(spec)
    if skew.get("rank") is not None and skew["rank"] != (rank or 0):
        return
    patches.install("skew", (skew, []))


def skewed_set_epoch(state: Tuple[Dict[str, Any], List[int]], original: Callable) -> Callable:
    """``state``: the skew, and the first epoch this process set (filled on the first call)."""
    skew, first = state

    def set_epoch(self, epoch: int) -> None:
        if skew["variant"] == "offset":
            return original(self, epoch + int(skew["offset"]))
        if not first:
            first.append(epoch)
        return original(self, epoch - first[0])

    return set_epoch
