"""The agent's patches on torch: optimizer hooks, backward, save, load and state restores.

Installed once, right after ``torch`` finishes importing. Each patch hands what it
sees to the ``Recorder`` and otherwise behaves exactly like what it replaces.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
from typing import Any, Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from chaosckpt.agent import patches, sampler, writers
from chaosckpt.agent.bursts import MEMORY, PAYLOAD_HEAD, Checkpoint, Payload
from chaosckpt.agent.recorder import Recorder


class CountingWriter:
    """A file object for ``torch.save`` that counts writes and bytes, for the call and across its checkpoint,
    and fires an armed fault at its place in the checkpoint."""

    def __init__(self, raw: Any, recorder: Recorder, checkpoint: Checkpoint, path: Optional[str],
                 named: Optional[str] = None) -> None:
        self._raw = raw
        self.tally = writers.FileTally(recorder, checkpoint, path, reported=True, named=named)  # its save reports it

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


class Hooks:
    """The ``torch`` layer's state: the recorder, and whether this thread is inside a recorded backward
    (``Tensor.backward`` calls ``autograd.backward``: recorded once per thread's call)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.local = threading.local()


def install(rec: Recorder) -> None:
    """Patch torch (and ``random.setstate``) to feed ``rec``."""
    register_optimizer_step_pre_hook(lambda opt, args, kwargs: rec.on_step(opt))
    register_optimizer_step_post_hook(lambda opt, args, kwargs: rec.on_step_end(opt))
    patches.install("torch", Hooks(rec))
    sampler.install(rec)
    rec.consumed.install()


def optimizer_init(hooks: Hooks, original: Callable) -> Callable:
    rec = hooks.rec

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        rec.optimizer_created(self)

    return __init__


def backward(hooks: Hooks, original: Callable) -> Callable:
    rec, local = hooks.rec, hooks.local

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


def scale(hooks: Hooks, original: Callable) -> Callable:
    rec = hooks.rec

    def scale(self, outputs):
        result = original(self, outputs)
        if isinstance(outputs, torch.Tensor) and result is not outputs:
            rec.guarded(rec.on_scaled, result, outputs, self)
        return result

    return scale


def scaler_update(hooks: Hooks, original: Callable) -> Callable:
    rec = hooks.rec

    def update(self, *args, **kwargs):
        rec.guarded(rec.on_scaler_update)
        return original(self, *args, **kwargs)

    return update


def torch_save(hooks: Hooks, original: Callable) -> Callable:
    rec = hooks.rec

    def save(obj, f, *args, **kwargs):
        if not rec.enabled:
            return original(obj, f, *args, **kwargs)
        if rec.saving:  # one item of a DCP save: the shard file its writer opened counts the bytes
            return original(obj, f, *args, **kwargs)
        if isinstance(f, io.BytesIO):
            return _save_into_memory(rec, original, obj, f, *args, **kwargs)
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


def _save_into_memory(rec: Recorder, original: Callable, obj: Any, f: io.BytesIO, *args: Any, **kwargs: Any) -> None:
    """A save call of the checkpoint into memory: recorded, its bytes neither counted nor struck (no file system
    sees them); the file write that carries them on counts them and takes the fault (``writers.FileTally``)."""
    with rec.recording_save(None, MEMORY, obj) as save:
        start = f.tell()
        original(obj, f, *args, **kwargs)
        with f.getbuffer() as view:
            head = bytes(view[start:start + PAYLOAD_HEAD])
        rec.serialized(save.checkpoint, Payload(head, save.checkpoint.whole))


def torch_load(hooks: Hooks, original: Callable) -> Callable:
    rec = hooks.rec

    def load(f, *args, **kwargs):
        if not rec.enabled:
            return original(f, *args, **kwargs)
        path = os.fspath(f) if _is_path(f) else _file_name(f)
        return _recorded_load(rec, path, lambda: original(f, *args, **kwargs), keep=True)

    return load


def _file_name(f: Any) -> Optional[str]:
    """The path a file object reads (an open file's ``name``, fsspec's ``path``, or its inner file's), so a load
    through one (Lightning's) still names its file; None for an in-memory buffer or a descriptor."""
    for holder in (f, getattr(f, "f", None)):
        for attr in ("path", "name"):
            value = getattr(holder, attr, None)
            if isinstance(value, str) and os.path.isfile(value):
                return value
    return None


def restore(hooks: Hooks, original: Callable, what: str) -> Callable:
    """A ``load_state_dict``: the recorder hears ``what`` was restored."""
    rec = hooks.rec

    def restore(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        rec.restored(what, self)
        return result

    return restore


def rng_restore(hooks: Hooks, original: Callable, what: str) -> Callable:
    """A random generator's state set: the recorder hears ``what`` was restored, and to which state."""
    rec = hooks.rec

    def set_state(state):
        result = original(state)
        rec.restored(what, state)
        return result

    return set_state


def install_dcp(rec: Recorder) -> None:
    """Record ``torch.distributed.checkpoint.save`` calls as saves of their checkpoint directory, and its
    ``load`` calls as loads of it."""
    patches.install("dcp", rec)


def dcp_save(rec: Recorder, original: Callable) -> Callable:
    def save(state_dict, *args, **kwargs):
        if not rec.enabled or rec.saving:
            return original(state_dict, *args, **kwargs)
        target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_writer"), "path", None)
        path = os.fspath(target) if _is_path(target) else None
        with rec.recording_save(path, "dcp", state_dict):
            return original(state_dict, *args, **kwargs)

    return save


def dcp_load(rec: Recorder, original: Callable) -> Callable:
    def load(state_dict, *args, **kwargs):
        if not rec.enabled:
            return original(state_dict, *args, **kwargs)
        target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_reader"), "path", None)
        path = os.fspath(target) if _is_path(target) else None
        return _recorded_load(rec, path, lambda: original(state_dict, *args, **kwargs), keep=False)

    return load


def install_dcp_process(rec: Recorder) -> None:
    """Record each state ``async_save`` in process mode hands to DCP's checkpoint process, which saves it."""
    patches.install("dcp-process", rec)


def dcp_process_handoff(rec: Recorder, original: Callable) -> Callable:
    def execute_save(self, staged, *args, **kwargs):
        if rec.enabled:
            target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_writer"), "path", None)
            rec.guarded(rec.handed_to_process, os.fspath(target) if _is_path(target) else None)
        return original(self, staged, *args, **kwargs)

    return execute_save


def install_dcp_state_dict(rec: Recorder) -> None:
    """``get_state_dict`` initialises an empty optimizer's state with one step at learning rate 0: a hidden
    step, not a training step."""
    patches.install("dcp-state-dict", rec)


def hidden_step(rec: Recorder, original: Callable) -> Callable:
    def init(optim, *args, **kwargs):
        rec.hidden_steps += 1
        try:
            return original(optim, *args, **kwargs)
        finally:
            rec.hidden_steps -= 1

    return init


def install_safetensors(rec: Recorder) -> None:
    """Record ``safetensors.torch.save_file`` (and ``save_model``, which calls it) as a save call of the open
    checkpoint. Its writer is native: with no fault armed it writes as it does and its bytes are counted from
    the file it produced; with one armed, the same bytes (``safetensors.torch.save``) are written through
    Python, where the fault can land at any of them, the way safetensors (0.8) writes them: into a temporary file
    ``.tmpXXXXXXXX`` beside the target (removed if a write fails), renamed over the target, no fsync."""
    patches.install("safetensors", rec)


def safetensors_save_file(rec: Recorder, original: Callable) -> Callable:
    import safetensors
    import safetensors.torch as st

    def save_file(tensors, filename, metadata=None):
        if not rec.enabled or rec.saving:
            return original(tensors, filename, metadata=metadata)
        path = os.fspath(filename)
        with rec.recording_save(path, "safetensors", tensors) as save:
            if rec.fault is None:
                original(tensors, filename, metadata=metadata)
                size = os.path.getsize(path)
                save.checkpoint.bytes += size
                save.checkpoint.writes += 1
                save.checkpoint.sizes.append(size)
                return None
            data = st.save(tensors, metadata=metadata)
            fd, tmp = tempfile.mkstemp(prefix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
            try:
                with open(fd, "wb") as raw:
                    save.writer = CountingWriter(raw, rec, save.checkpoint, tmp, named=path)
                    save.writer.write(data)
            except OSError as exc:  # safetensors removes its temporary file and raises its own error
                os.unlink(tmp)
                raise safetensors.SafetensorError(f"Error while serializing: {exc}") from exc
            os.rename(tmp, path)
        return None

    return save_file
