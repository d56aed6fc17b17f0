"""A safetensors file read from its header alone: no code, no tensor data, no safetensors library.

The format is an 8-byte little-endian header length, a JSON header (``{name: {"dtype", "shape",
"data_offsets": [begin, end]}}`` plus an optional ``"__metadata__"`` of strings), then the tensor bytes.
The safetensors library refuses a file whose header is over 100 MB, whose offsets do not match each
tensor's dtype and shape, leave gaps or overlap, or do not cover the data exactly to the file's end; so
does this reader, which says which rule a file breaks. The header is read only once its length is known
to fit in the file and under that limit, so a hostile length costs nothing. Tensor bytes carry no
checksum: a bit flipped there is invisible to any reader.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, BinaryIO, Dict, List, Tuple

import torch

MAX_HEADER = 100_000_000
"""The largest header the safetensors library accepts."""

_DTYPES: Dict[str, Tuple[str, int]] = {
    "BOOL": ("bool", 8), "U8": ("uint8", 8), "I8": ("int8", 8), "F8_E5M2": ("float8_e5m2", 8),
    "F8_E4M3": ("float8_e4m3fn", 8), "F8_E8M0": ("float8_e8m0fnu", 8), "I16": ("int16", 16),
    "U16": ("uint16", 16), "F16": ("float16", 16), "BF16": ("bfloat16", 16), "I32": ("int32", 32),
    "U32": ("uint32", 32), "F32": ("float32", 32), "I64": ("int64", 64), "U64": ("uint64", 64),
    "F64": ("float64", 64), "C64": ("complex64", 64), "F4": ("", 4), "F6_E2M3": ("", 6), "F6_E3M2": ("", 6),
}
"""safetensors dtype -> (torch dtype name, bits per element); sub-byte ones have no torch dtype."""
_MAX_DIM = 1 << 62


class HeaderError(ValueError):
    """Why the file is not a loadable safetensors file, in one line."""


def _tensor(name: str, entry: Any, data_bytes: int) -> Tuple[torch.Tensor, int, int]:
    """A meta tensor of the entry's dtype and shape, and its byte span, after checking the entry's fields."""
    if not isinstance(entry, dict):
        raise HeaderError(f"damaged: the header's entry for {name} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in _DTYPES:
        raise HeaderError(f"damaged: tensor {name} has dtype {json.dumps(dtype)}, which safetensors does not know")
    if not isinstance(shape, list) or not all(type(n) is int and 0 <= n < _MAX_DIM for n in shape):
        raise HeaderError(f"damaged: tensor {name} has shape {json.dumps(shape)[:60]}, not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise HeaderError(f"damaged: tensor {name} has data_offsets {json.dumps(offsets)[:60]}, not [begin, end]")
    begin, end = offsets
    torch_name, bits = _DTYPES[dtype]
    numel = math.prod(shape)
    if numel * bits % 8 or end - begin != numel * bits // 8:
        raise HeaderError(f"damaged: tensor {name} ({dtype}{shape}) needs {numel * bits / 8:g} bytes, "
                          f"its data_offsets span {end - begin}")
    if end > data_bytes:
        raise HeaderError(f"torn: tensor {name} ends at byte {end} of the data, which stops at {data_bytes}: "
                          "the file was cut short")
    kind = getattr(torch, torch_name, None) if torch_name else None
    if isinstance(kind, torch.dtype):
        return torch.empty(shape, dtype=kind, device="meta"), begin, end
    return torch.empty(end - begin, dtype=torch.uint8, device="meta"), begin, end


def _covered(spans: List[Tuple[int, int, str]], data_bytes: int) -> None:
    """The tensors' bytes follow one another from 0 to the end of the file, as the library requires."""
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else f"leaves {begin - at} bytes unused before it"
            raise HeaderError(f"damaged: tensor {name} starts at byte {begin} of the data and {what}")
        at = end
    if at != data_bytes:
        raise HeaderError(f"damaged: {data_bytes - at} bytes follow the last tensor, which the header does not "
                          "describe (the library refuses a file its header does not cover exactly)")


def read(handle: BinaryIO, size: int) -> Dict[str, Any]:
    """The file's tensors as meta tensors by name (and ``__metadata__`` when there is one); :class:`HeaderError`
    when the safetensors library would refuse to load it."""
    if size < 8:
        raise HeaderError(f"torn: {size} bytes, fewer than the 8 of a safetensors header length")
    (length,) = struct.unpack("<Q", handle.read(8))
    if length > size - 8:
        raise HeaderError(f"torn or damaged: the header length says {length} bytes, and only {size - 8} follow it")
    if length > MAX_HEADER:
        raise HeaderError(f"a {length}-byte header, over the {MAX_HEADER} bytes the safetensors library accepts")
    try:
        header = json.loads(handle.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"damaged: the header is not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(header, dict):
        raise HeaderError("damaged: the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise HeaderError("damaged: __metadata__ is not an object of strings")
    data_bytes = size - 8 - length
    tensors: Dict[str, Any] = {}
    spans = []
    for name, entry in header.items():
        tensors[name], begin, end = _tensor(name, entry, data_bytes)
        spans.append((begin, end, name))
    _covered(spans, data_bytes)
    if metadata:
        tensors["__metadata__"] = metadata
    return tensors
