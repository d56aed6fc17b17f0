"""A torch.distributed.checkpoint folder judged from its ``.metadata`` and shards, without DCP's code.

``dcp.save`` writes one ``__R_I.distcp`` shard per rank and writer, then ``.metadata`` last (rank 0):
a pickle of DCP's dataclasses naming, for every item, its shard, offset and length. It is read with
audit's allowlisted unpickler (DCP's own classes become inert placeholders), every shard it names must
be there and long enough, and every record in a shard (a ``torch.save`` archive of a tensor or of a
pickled value) is read as audit reads a file, CRCs included. The state is rebuilt from the metadata: meta
tensors of the saved shapes, the pickled values themselves, and the value of one-element integer tensors
(a ``step`` saved as ``torch.tensor(8)``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import torch

from chaosckpt.conductor.disk import audit
from chaosckpt.conductor.disk.file_names import DCP_METADATA, DCP_SHARD_SUFFIX

_DCP_NAMES = ("torch.distributed.checkpoint.", "torch.serialization._get_layout", "pathlib.")
"""What every ``.metadata`` pickles: DCP reads it with ``pickle.load``, so these are no finding."""


def finding(kind: str, message: str, **evidence: Any) -> Dict[str, Any]:
    return {"kind": kind, "message": message, **evidence}


def _pickle_findings(log: audit.PickleLog) -> List[Dict[str, Any]]:
    """The log's findings, less ``pickled-objects`` when the only objects are those DCP itself pickles."""
    foreign = [n for n in log.names if not n.startswith(_DCP_NAMES)]
    return [f for f in log.findings() if f["kind"] != "pickled-objects" or foreign]


def _unreadable(name: str, size: int, error: str, log: Optional[audit.PickleLog] = None) -> Dict[str, Any]:
    found = _pickle_findings(log) if log is not None else []
    return {"path": name, "bytes": size, "file_format": None, "contents": None,
            "findings": found + [finding("unreadable-checkpoint", f"cannot be loaded: {error}", error=error)]}


def _dtype(properties: Any) -> torch.dtype:
    """The dtype in a pickled ``TensorProperties`` (a dataclass pickled as a tuple of its fields)."""
    state = properties.get("__state__") if isinstance(properties, dict) else None
    value = state[0] if isinstance(state, tuple) and state else (properties or {}).get("dtype")
    return value if isinstance(value, torch.dtype) else torch.uint8


def _meta_tensor(entry: Any) -> Optional[torch.Tensor]:
    """A meta tensor of a ``TensorStorageMetadata``'s shape and dtype, or None when it has no sensible shape."""
    size = entry.get("size") if isinstance(entry, dict) else None
    if not isinstance(size, (tuple, list)) or not all(type(n) is int and n >= 0 for n in size):
        return None
    try:
        return torch.empty(tuple(size), dtype=_dtype(entry.get("properties")), device="meta")
    except (RuntimeError, ValueError, OverflowError):
        return None


def _place(state: Dict[str, Any], path: Any, fqn: str, value: Any) -> None:
    """Put ``value`` where ``planner_data`` says the item sat in the saved state dict (else under its fqn)."""
    keys = [str(k) for k in path] if isinstance(path, tuple) and path else fqn.split(".")
    node = state
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value


def _records(metadata: Dict[str, Any]) -> Dict[str, List[Tuple[str, int, int, Any]]]:
    """Shard name -> (fqn, offset, length, transforms) of each record ``.metadata`` places in it."""
    storage = metadata.get("storage_data")
    if not isinstance(storage, dict):
        raise audit.AuditError("damaged: .metadata has no storage_data (which record is in which shard)")
    shards: Dict[str, List[Tuple[str, int, int, Any]]] = defaultdict(list)
    for index, info in storage.items():
        index, info = index if isinstance(index, dict) else {}, info if isinstance(info, dict) else {}
        fqn, rel, offset, length = index.get("fqn"), info.get("relative_path"), info.get("offset"), info.get("length")
        if not (isinstance(fqn, str) and isinstance(rel, str) and type(offset) is int and type(length) is int
                and offset >= 0 and length >= 0):
            raise audit.AuditError("damaged: .metadata has a storage record without a shard name, offset and length")
        if os.path.basename(rel) != rel or rel in ("", ".", ".."):
            raise audit.AuditError(f"damaged: .metadata places {fqn} in {rel[:80]}, which is not a file of the folder")
        shards[rel].append((fqn, offset, length, info.get("transform_descriptors")))
    return shards


def judge(folder: str, prefix: str, names: Dict[str, int], max_inflate: Optional[int]) -> Dict[str, Any]:
    """Judge the DCP checkpoint in ``folder`` (``names``: its regular files and their sizes; ``prefix``: how the
    report names the folder). ``{"files", "findings", "state", "notes"}``: per-file reports as ``audit_file``
    makes them, findings about the checkpoint as a whole, the rebuilt state dict (None without ``.metadata``)."""
    shards = sorted(n for n in names if n.endswith(DCP_SHARD_SUFFIX))
    if DCP_METADATA not in names:
        files: List[Dict[str, Any]] = [
            {"path": prefix + n, "bytes": names[n], "file_format": "DCP shard", "contents": None, "findings": []}
            for n in shards]
        return {"files": files, "state": None, "notes": [], "findings": [finding(
            "incomplete-checkpoint", f"{prefix or 'the folder'} holds {len(shards)} shard{'' if len(shards) == 1 else 's'} "
            "and no .metadata: dcp.save writes it last, on rank 0, once every rank's shards are written, so this save "
            "never finished and dcp.load refuses the folder", missing=[prefix + DCP_METADATA])]}
    log = audit.PickleLog()
    meta_path = os.path.join(folder, DCP_METADATA)
    try:
        metadata = audit.load(meta_path, max_inflate, log).obj
        if not isinstance(metadata, dict) or not isinstance(metadata.get("state_dict_metadata"), dict):
            raise audit.AuditError("not DCP metadata (no state_dict_metadata in it)")
        records = _records(metadata)
    except audit.AuditError as exc:
        return {"files": [_unreadable(prefix + DCP_METADATA, names[DCP_METADATA], str(exc), log)],
                "state": None, "notes": [], "findings": []}
    files = [{"path": prefix + DCP_METADATA, "bytes": names[DCP_METADATA], "file_format": "DCP metadata", "contents": None,
              "findings": _pickle_findings(log)}]
    loaded: Dict[str, Any] = {}
    findings: List[Dict[str, Any]] = []
    for shard in sorted(records):
        placed = records[shard]
        if shard not in names:
            findings.append(finding("incomplete-checkpoint", (
                f".metadata places {len(placed)} record(s) in {prefix}{shard}, which is not in the folder: "
                "dcp.load fails on it"), missing=[prefix + shard]))
            continue
        files.append(_shard(os.path.join(folder, shard), prefix + shard, names[shard], placed, metadata, loaded,
                            max_inflate))
    notes = [f"{prefix}{n}: a shard .metadata does not name (left by another save?): not judged"
             for n in shards if n not in records]
    return {"files": files, "findings": findings, "notes": notes, "state": _state(metadata, loaded)}


def _shard(path: str, name: str, size: int, placed: List[Tuple[str, int, int, Any]], metadata: Dict[str, Any],
           loaded: Dict[str, Any], max_inflate: Optional[int]) -> Dict[str, Any]:
    """One shard: long enough for every record .metadata places in it, and every record readable."""
    end = max(offset + length for _, offset, length, _ in placed)
    if size < end:
        return _unreadable(name, size, f"torn: {size} bytes, and .metadata places records up to byte {end}")
    log = audit.PickleLog()
    tensors = metadata["state_dict_metadata"]
    try:
        with audit.open_regular(path) as handle:
            for fqn, offset, length, transforms in sorted(placed, key=lambda r: r[1]):
                if transforms:
                    continue  # compressed or otherwise transformed by a DCP extension: its size was checked
                try:
                    record = audit.load_record(handle, offset, length, log, max_inflate or audit.inflate_limit(length))
                except audit.AuditError as exc:
                    return _unreadable(name, size, f"item {fqn} (bytes {offset}..{offset + length} of the shard): {exc}", log)
                tensor = _meta_tensor(tensors.get(fqn))
                if tensor is None:
                    loaded[fqn] = record.obj
                elif tensor.numel() == 1:
                    value = audit.scalar(handle, offset, length, tensor.dtype)
                    loaded[fqn] = tensor if value is None else torch.tensor(value, dtype=tensor.dtype).reshape(tensor.shape)
                else:
                    loaded[fqn] = tensor
    except audit.AuditError as exc:
        return _unreadable(name, size, str(exc), log)
    except OSError as exc:
        return _unreadable(name, size, f"cannot read it: {exc.strerror or exc}", log)
    return {"path": name, "bytes": size, "file_format": "DCP shard", "contents": None, "findings": log.findings()}


def _state(metadata: Dict[str, Any], loaded: Dict[str, Any]) -> Dict[str, Any]:
    """The saved state dict as nested dicts: what was read from the shards, meta tensors for the rest."""
    planner = metadata.get("planner_data")
    planner = planner if isinstance(planner, dict) else {}
    state: Dict[str, Any] = {}
    for fqn, entry in metadata["state_dict_metadata"].items():
        _place(state, planner.get(fqn), str(fqn), loaded[fqn] if fqn in loaded else _meta_tensor(entry))
    return state
