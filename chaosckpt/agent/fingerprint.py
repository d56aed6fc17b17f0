"""Digests of parameters and fingerprints of random streams, cheap enough for a training loop.

The exact digest (CRC-32 over every parameter's raw bytes, in order) costs about
1 ms per 4 MB, so it is taken only where a resume can start: at saves, at the
first step of a process and at the first step after a load. Every step carries a
sample fingerprint instead: float sums of a fixed strided sample of each
parameter, which any divergence of the trajectory changes.
"""

from __future__ import annotations

import ctypes
import random
import sys
import zlib
from typing import Dict, Iterable, List, Tuple

import torch

SAMPLES_PER_PARAM = 1024


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The values this process holds: a DTensor's (FSDP2, tensor parallel) local shard, else the tensor."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None and type(tensor).__name__ == "DTensor" else tensor


def crc_of_tensor(tensor: torch.Tensor, crc: int = 0) -> int:
    """CRC-32 of a tensor's bytes (a DTensor's local shard), continuing from ``crc``; copies to the host only
    when it must."""
    t = local(tensor).detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return crc
    return zlib.crc32((ctypes.c_char * nbytes).from_address(t.data_ptr()), crc)


def exact_digest(params: Iterable[torch.Tensor]) -> str:
    """Exact, order-sensitive digest of parameter values, shapes and dtypes."""
    crc = 0
    count = 0
    for p in params:
        crc = zlib.crc32(f"{tuple(p.shape)}{p.dtype}".encode(), crc)
        crc = crc_of_tensor(p, crc)
        count += 1
    return f"{crc:08x}.{count}"


def sample_fingerprint(params: Iterable[torch.Tensor]) -> Tuple[str, float]:
    """Exact fingerprint (hex) and float total of a strided sample of every parameter."""
    sums = []
    with torch.no_grad():
        for p in params:
            flat = local(p).detach().reshape(-1)
            n = flat.numel()
            if n == 0:
                continue
            stride = max(1, n // SAMPLES_PER_PARAM)
            sums.append(flat[::stride].sum(dtype=torch.float32))
        if not sums:
            return "empty", 0.0
        stacked = torch.stack(sums).cpu()
    return f"{crc_of_tensor(stacked):08x}", float(stacked.double().sum())


def python_random(state: tuple) -> str:
    """Fingerprint of a ``random.getstate()``: ints, bools and finite floats hash the same in every process
    (``None``, NaN and strings do not, so the cached gauss is hashed as a flag and a number)."""
    version, internal, gauss = state
    return f"{hash((version, internal, gauss is None, gauss or 0.0)) & 0xFFFFFFFF:08x}"


def rng_fingerprints() -> Dict[str, str]:
    """Fingerprints of the process-wide random streams: torch CPU, Python, numpy, each CUDA device."""
    fps = {"torch": _torch_cpu(), "python": python_random(random.getstate())}
    np = sys.modules.get("numpy")
    if np is not None:
        state = np.random.get_state()
        fps["numpy"] = f"{zlib.crc32(state[1].tobytes()) ^ state[2]:08x}"
    fps.update(_cuda())
    return fps


def torch_rng_fingerprints() -> Dict[str, str]:
    """Fingerprints of torch's own streams only (CPU, each CUDA device): what a batch's fetch is noted by, at every
    step, without hashing Python's and numpy's states for nothing."""
    return {"torch": _torch_cpu(), **_cuda()}


def _torch_cpu() -> str:
    return f"{crc_of_tensor(torch.default_generator.get_state()):08x}"


def _cuda() -> Dict[str, str]:
    if not torch.cuda.is_initialized():
        return {}
    return {f"cuda:{i}": f"{crc_of_tensor(torch.cuda.get_rng_state(i)):08x}" for i in range(torch.cuda.device_count())}


def value_samples(tensors: Iterable[torch.Tensor]) -> List[str]:
    """Per floating tensor, the CRC-32 of a fixed strided sample of its values as float32: the same for a tensor
    and a copy in another floating dtype that holds its values exactly (a half-precision copy loaded into float32
    parameters), so a resume's parameters can be told apart by the tensors they were loaded from."""
    samples = []
    with torch.no_grad():
        for t in tensors:
            flat = local(t).detach().reshape(-1)
            samples.append(flat[::max(1, flat.numel() // SAMPLES_PER_PARAM)].to(torch.float32))
    if not samples:
        return []
    devices = {s.device for s in samples}
    host = torch.cat(samples).cpu() if len(devices) == 1 else torch.cat([s.cpu() for s in samples])
    out, at = [], 0
    for s in samples:
        out.append(f"{crc_of_tensor(host[at:at + s.numel()]):08x}")
        at += s.numel()
    return out
