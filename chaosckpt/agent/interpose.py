"""The agent's patches on torch: optimizer hooks, backward, save, load and state restores.

Installed once, right after ``torch`` finishes importing. Each patch hands what it
sees to the ``Recorder`` and otherwise behaves exactly like what it replaces.
"""

from __future__ import annotations

import functools
import os
import random
import threading
from typing import Any, Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from chaosckpt.agent import sampler, writers
from chaosckpt.agent.recorder import Checkpoint, Recorder


class CountingWriter:
    """A file object for ``torch.save`` that counts writes and bytes, for the call and across its checkpoint,
    and fires an armed fault at its place in the checkpoint."""

    def __init__(self, raw: Any, recorder: Recorder, checkpoint: Checkpoint, path: Optional[str]) -> None:
        self._raw = raw
        self.tally = writers.FileTally(recorder, checkpoint, path, reported=True)  # its save call reports it

    @property
    def writes(self) -> int:
        return self.tally.writes

    @property
    def bytes(self) -> int:
        return self.tally.bytes

    @property
    def ends(self) -> Optional[list]:
        return self.tally.ends

    def write(self, data: Any) -> int:
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        size = view.nbytes
        self.tally.write(size, lambda n: self._raw.write(view if n is None else view[:n]), self._raw.flush)
        return size

    def flush(self) -> None:
        self._raw.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _is_path(f: Any) -> bool:
    return isinstance(f, (str, os.PathLike))


def _patch(owner: Any, name: str, make: Any) -> None:
    original = getattr(owner, name)
    replacement = functools.wraps(original)(make(original))
    replacement.__chaosckpt_original__ = original
    setattr(owner, name, replacement)



def _recorded_load(rec: Recorder, path: Optional[str], call: Callable[[], Any], keep: bool) -> Any:
    """Run a load and record it, raised or returned; ``keep``: the loaded object is judged too (torch.load's,
    not DCP's, which loads in place)."""
    try:
        result = call()
    except BaseException as exc:
        rec.loaded(path, None, exc)
        raise
    rec.loaded(path, result if keep else None, None)
    return result


def install(rec: Recorder) -> None:
    """Patch torch (and ``random.setstate``) to feed ``rec``."""
    register_optimizer_step_pre_hook(lambda opt, args, kwargs: rec.on_step(opt))
    register_optimizer_step_post_hook(lambda opt, args, kwargs: rec.on_step_end(opt))

    def make_optimizer_init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            rec.optimizer_created(self)
        return __init__

    _patch(torch.optim.Optimizer, "__init__", make_optimizer_init)

    local = threading.local()  # Tensor.backward calls autograd.backward: record once per thread's call

    def make_backward(original):
        def backward(tensor, *args, **kwargs):
            if getattr(local, "inside", False):
                return original(tensor, *args, **kwargs)
            local.inside = True
            try:
                if isinstance(tensor, torch.Tensor):
                    rec.guarded(rec.on_backward, tensor)
                return original(tensor, *args, **kwargs)
            finally:
                local.inside = False
        return backward

    _patch(torch.Tensor, "backward", make_backward)
    _patch(torch.autograd, "backward", make_backward)

    def make_scale(original):
        def scale(self, outputs):
            result = original(self, outputs)
            if isinstance(outputs, torch.Tensor) and result is not outputs:
                rec.guarded(rec.on_scaled, result, outputs)
            return result
        return scale

    def make_update(original):
        def update(self, *args, **kwargs):
            rec.guarded(rec.on_scaler_update)
            return original(self, *args, **kwargs)
        return update

    _patch(torch.amp.GradScaler, "scale", make_scale)
    _patch(torch.amp.GradScaler, "update", make_update)

    def make_save(original):
        def save(obj, f, *args, **kwargs):
            if not rec.enabled:
                return original(obj, f, *args, **kwargs)
            if rec.saving:  # one item of a DCP save: the shard file its writer opened counts the bytes
                return original(obj, f, *args, **kwargs)
            path = os.fspath(f) if _is_path(f) else None
            if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                return original(obj, f, *args, **kwargs)  # let torch raise its own error
            name = path if path is not None else getattr(f, "name", None)
            name = name if isinstance(name, str) else None
            with rec.recording_save(name, "path" if path is not None else "fileobj", obj) as save:
                if path is not None:
                    with open(path, "wb") as raw:
                        save.writer = CountingWriter(raw, rec, save.checkpoint, path)
                        original(obj, save.writer, *args, **kwargs)
                else:
                    writers.claim(f)
                    save.writer = CountingWriter(f, rec, save.checkpoint, name)
                    original(obj, save.writer, *args, **kwargs)
        return save

    def make_load(original):
        def load(f, *args, **kwargs):
            if not rec.enabled:
                return original(f, *args, **kwargs)
            path = os.fspath(f) if _is_path(f) else None
            return _recorded_load(rec, path, lambda: original(f, *args, **kwargs), keep=True)
        return load

    for module in (torch.serialization, torch):
        _patch(module, "save", make_save)
        _patch(module, "load", make_load)

    def make_restore(what):
        def make(original):
            def restore(self, *args, **kwargs):
                result = original(self, *args, **kwargs)
                rec.restored(what, self)
                return result
            return restore
        return make

    _patch(torch.nn.Module, "load_state_dict", make_restore("module"))
    _patch(torch.optim.Optimizer, "load_state_dict", make_restore("optimizer"))

    def make_rng_restore(what):
        def make(original):
            def set_state(state):
                result = original(state)
                rec.restored(what, state)
                return result
            return set_state
        return make

    for module in (torch, torch.random):
        _patch(module, "set_rng_state", make_rng_restore("torch-rng"))
    _patch(random, "setstate", make_rng_restore("python-rng"))
    sampler.install(rec)


def install_dcp(rec: Recorder) -> None:
    """Record ``torch.distributed.checkpoint.save`` calls as saves of their checkpoint directory, and its
    ``load`` calls as loads of it."""
    import torch.distributed.checkpoint as dcp

    def make_save(original):
        def save(state_dict, *args, **kwargs):
            if not rec.enabled or rec.saving:
                return original(state_dict, *args, **kwargs)
            target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_writer"), "path", None)
            path = os.fspath(target) if _is_path(target) else None
            with rec.recording_save(path, "dcp", state_dict):
                return original(state_dict, *args, **kwargs)
        return save

    def make_load(original):
        def load(state_dict, *args, **kwargs):
            if not rec.enabled:
                return original(state_dict, *args, **kwargs)
            target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_reader"), "path", None)
            path = os.fspath(target) if _is_path(target) else None
            return _recorded_load(rec, path, lambda: original(state_dict, *args, **kwargs), keep=False)
        return load

    _patch(dcp, "save", make_save)
    _patch(dcp, "load", make_load)


def install_dcp_state_dict(rec: Recorder) -> None:
    """``get_state_dict`` initialises an empty optimizer's state with one step at learning rate 0: a hidden
    step, not a training step."""
    import torch.distributed.checkpoint.state_dict as state_dict

    def make_init(original):
        def init(optim, *args, **kwargs):
            rec.hidden_steps += 1
            try:
                return original(optim, *args, **kwargs)
            finally:
                rec.hidden_steps -= 1
        return init

    _patch(state_dict, "_init_optim_state", make_init)


def install_safetensors(rec: Recorder) -> None:
    """Record ``safetensors.torch.save_file`` (and ``save_model``, which calls it) as a save call of the open
    checkpoint. Its writer is native: with no fault armed it writes as it does and its bytes are counted from
    the file it produced; with one armed, the same bytes (``safetensors.torch.save``) are written through
    Python, where the fault can land at any of them."""
    import safetensors
    import safetensors.torch as st

    def make_save_file(original):
        def save_file(tensors, filename, metadata=None):
            if not rec.enabled or rec.saving:
                return original(tensors, filename, metadata=metadata)
            path = os.fspath(filename)
            with rec.recording_save(path, "safetensors", tensors) as save:
                if rec.fault is None:
                    original(tensors, filename, metadata=metadata)
                    save.checkpoint.bytes += os.path.getsize(path)
                    save.checkpoint.writes += 1
                    return None
                data = st.save(tensors, metadata=metadata)
                with open(path, "wb") as raw:
                    save.writer = CountingWriter(raw, rec, save.checkpoint, path)
                    try:
                        save.writer.write(data)
                    except OSError as exc:  # raised as safetensors' own writer raises it
                        raise safetensors.SafetensorError(f"Error while serializing: {exc}") from exc
            return None
        return save_file

    _patch(st, "save_file", make_save_file)
