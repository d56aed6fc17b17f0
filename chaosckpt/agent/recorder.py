"""What the agent records about the training loop: steps, losses, parameter digests, random streams, saves, loads."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, NamedTuple, Optional

import torch

from chaosckpt import protocol
from chaosckpt.agent import faults, fingerprint
from chaosckpt.agent.channel import EventWriter
from chaosckpt.agent.faults import ArmedFault
from chaosckpt.agent.horizon import Horizon
from chaosckpt.agent.modes import Modes
from chaosckpt.agent.streams import Streams

if TYPE_CHECKING:  # imported by the runtime only when a fault asks for the journal
    from chaosckpt.agent.fileops import Journal


def _one_line(exc: BaseException) -> str:
    message = str(exc).strip()
    if not message:
        return type(exc).__name__
    return f"{type(exc).__name__}: {message}".splitlines()[0][:300]


class Recorder:
    """The per-process recording state, fed by the hooks that ``interpose`` installs."""

    def __init__(self, writer: EventWriter, rank: Optional[int], fault: Optional[ArmedFault],
                 horizon: Optional[Horizon] = None) -> None:
        self.writer = writer
        self.horizon = horizon
        self.rank = rank
        self.fault = fault if fault is not None and fault.applies_to(rank) else None
        self.enabled = True
        self.step = 0
        self.saves = 0
        self._optimizers: List[weakref.ref] = []
        self._primary: Optional[weakref.ref] = None
        self._pending_losses: List[torch.Tensor] = []
        self._step_fields: Optional[Dict[str, object]] = None  # measured before the step, sent when it returns
        self._fetch_rng: Optional[Dict[str, str]] = None
        self._batch: Optional[str] = None  # the indices of the latest batch a DataLoader drew, as a CRC
        self._scaled: Dict[int, torch.Tensor] = {}
        self._need_digest = True
        self._sample_next = False  # a checkpoint's tensor sets were loaded: the next step samples each parameter
        self.checkpoint: Optional[Checkpoint] = None  # open from a checkpoint's first save call to the next step
        self.saving_via: Optional[str] = None
        self.saving_path: Optional[str] = None
        self.hidden_steps = 0  # inside get_state_dict's optimizer state initialisation: its step is no training step
        self.saving = False  # inside a save: saves it makes itself (DCP's items) are part of it
        self.journal: Optional["Journal"] = None
        self.streams = Streams()
        self.modes = Modes()
        self._last_rng: Dict[str, str] = {}
        self._drawn: set = set()  # streams whose state moved between two steps: the loop draws from them
        self._halt_pending: Optional[dict] = None
        self._op_base = 0
        self._eval_done = False
        self._save_began = 0.0
        self.moving: Optional[Dict[str, str]] = None  # the move or copy in progress inside the open checkpoint

    def fire(self, **fields: object) -> None:
        """The armed fault's moment has come: halt for the conductor's SIGKILL, or fail the write with ENOSPC.
        The event names the files the process was still writing and the copy it was inside, if any: a killed
        process sends no ``save-file`` or ``save-move`` event for them."""
        fields = {"fault": self.fault.kind, "save": self.fault.save, **fields, **self._in_progress()}
        if self.fault.kind == "halt":
            faults.halt(self.writer, **fields)
        self.emit("fault", **fields)
        raise faults.disk_full_error()

    def _in_progress(self) -> Dict[str, object]:
        ckpt = self.checkpoint
        writing = [self.saving_path] if self.saving and self.saving_path is not None else []
        for tally in ckpt.tallies if ckpt is not None else ():
            if not tally.reported and tally.path is not None and tally.path not in writing and tally.live():
                writing.append(tally.path)
        return {**({"writing": writing} if writing else {}), **({"inside": dict(self.moving)} if self.moving else {})}

    def at_exit(self) -> None:
        """The process exits: its open checkpoint is as complete as it will get; a pending halt fires now."""
        if self.enabled:
            self.guarded(self.close_checkpoint)
        self.fire_pending()
        self.emit("exit", step=self.step)

    def fire_pending(self) -> None:
        """Halt now if a save that was to be followed by a crash has returned."""
        if self._halt_pending is not None and self.enabled:
            pending, self._halt_pending = self._halt_pending, None
            self.fire(**pending)

    def _count_op(self, index: int, kind: str) -> None:
        if self.fault is not None and index - self._op_base == self.fault.at_op:
            self.fire(op=index, after=kind)

    def emit(self, kind: str, **fields: object) -> None:
        if self.enabled:
            self.writer.emit(kind, **fields)

    def disable(self) -> None:
        """Stop recording for good (a forked child such as a DataLoader worker)."""
        self.enabled = False

    def optimizer_created(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizers.append(weakref.ref(optimizer))

    def params(self) -> List[torch.Tensor]:
        """Parameters of every live optimizer, in creation order, each once."""
        seen = set()
        out = []
        for ref in self._optimizers:
            opt = ref()
            if opt is None:
                continue
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) not in seen:
                        seen.add(id(p))
                        out.append(p)
        return out

    def on_backward(self, tensor: torch.Tensor) -> None:
        """Keep the loss a backward started from; converted to a float once per step."""
        if not self.enabled or tensor.numel() != 1:
            return
        unscaled = self._scaled.pop(id(tensor), None)
        self._pending_losses.append(unscaled if unscaled is not None else tensor.detach())

    def guarded(self, hook, *args) -> None:
        """Run a recording hook; whatever goes wrong in it stays out of the job (its events just miss)."""
        try:
            hook(*args)
        except Exception:
            self._pending_losses.clear()

    def on_scaled(self, scaled: torch.Tensor, loss: torch.Tensor) -> None:
        """GradScaler.scale produced ``scaled`` from ``loss``: record the unscaled value at backward."""
        self._scaled[id(scaled)] = loss.detach()

    def _take_losses(self) -> List[float]:
        losses = [float(x) for x in self._pending_losses]
        self._pending_losses.clear()
        self._scaled.clear()
        return losses

    def on_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Optimizer pre-step hook: the state the step starts from (digest, RNG, modes) of the primary optimizer."""
        if not self.enabled or self.hidden_steps:
            return
        if self.checkpoint is not None:
            self.guarded(self.close_checkpoint)
        self.fire_pending()
        if self._primary is None or self._primary() is None:
            self._primary = weakref.ref(optimizer)
        elif self._primary() is not optimizer:
            return
        self._end_step()  # a step whose optimizer.step() raised: booked without waiting for it
        if self.horizon is not None and self.horizon.due(self.step):
            faults.halt(self.writer, event="stop", flag=protocol.STOP_FLAG_PREFIX, step=self.step)
        self.step += 1
        self.guarded(self._record_step, optimizer)

    def on_step_end(self, optimizer: torch.optim.Optimizer) -> None:
        """Optimizer post-step hook: the step is known now, with the losses its closure computed (Lightning, LBFGS)."""
        if self.enabled and not self.hidden_steps and self._primary is not None and self._primary() is optimizer:
            self._end_step()

    def _end_step(self) -> None:
        fields, self._step_fields = self._step_fields, None
        if fields is not None:
            self.guarded(self._emit_step, fields)

    def _emit_step(self, fields: Dict[str, object]) -> None:
        self.emit("step", **fields, loss=self._take_losses())

    def on_batch(self) -> None:
        """A DataLoader hands out a batch: at the step's first, note the device streams before its forward draws."""
        if self.enabled and self._fetch_rng is None:
            self.guarded(self._note_fetch_rng)

    def on_indices(self, crc: Optional[str]) -> None:
        """A DataLoader drew a batch (``crc``: of its dataset indices): the latest batch drawn before a step names
        the batch it trains on, which lines a resumed run's steps up with the uninterrupted run's."""
        if self.enabled:
            self._batch = crc

    def _note_fetch_rng(self) -> None:
        self._fetch_rng = fingerprint.torch_rng_fingerprints()

    def _record_step(self, optimizer: torch.optim.Optimizer) -> None:
        params = self.params()
        if self.step == 1:
            self.streams.rescan()
            self.modes.discover(params)
        pfp, psum = fingerprint.sample_fingerprint(params)
        rng = self.streams.fingerprints()
        self._drawn.update(k for k, v in rng.items() if k in self._last_rng and self._last_rng[k] != v)
        self._last_rng = rng
        fields = {
            "step": self.step,
            "opt": self._index_of(optimizer),
            "pfp": pfp,
            "psum": psum,
            "rng": rng,
        }
        if self._fetch_rng is not None:
            fields["rng_fetch"], self._fetch_rng = self._fetch_rng, None
        if self._batch is not None:
            fields["batch"], self._batch = self._batch, None
        in_eval = self.modes.in_eval()
        if in_eval:
            fields["eval"] = in_eval
        if self.step == 1 and self.streams.aliases:
            fields["aliases"] = self.streams.aliases
        if self._need_digest:
            fields["digest"] = fingerprint.exact_digest(params)
            self._need_digest = False
        if self._sample_next:
            fields["samples"] = fingerprint.value_samples(params)
            self._sample_next = False
        self._step_fields = fields

    def on_scaler_update(self) -> None:
        """A GradScaler step that found inf/NaN skipped the optimizer: record its loss all the same."""
        if self.enabled and self._pending_losses:
            self.emit("step", step=self.step, opt=0, loss=self._take_losses(), skipped=True)

    def _index_of(self, optimizer: torch.optim.Optimizer) -> int:
        for index, ref in enumerate(self._optimizers):
            if ref() is optimizer:
                return index
        return -1

    def save_begin(self, path: Optional[str], via: str, obj: object = None) -> "Checkpoint":
        """A save call begins: part of the open checkpoint, or the first of a new one (a step since the last)."""
        self.fire_pending()
        self.saving = True
        self.saving_via, self.saving_path = via, None if path is None else os.path.abspath(path)
        ckpt = self.checkpoint or self._open_checkpoint(path, via)
        ckpt.whole = False
        if obj is not None and self.step:
            self.guarded(self._look_into, obj, ckpt)
        if path is not None and via != "dcp":
            ckpt.folders.add(os.path.dirname(os.path.abspath(path)))
        if self.journal is not None and path is not None:
            self.journal.track(path if via == "dcp" else os.path.dirname(os.path.abspath(path)))
        return ckpt

    def _open_checkpoint(self, path: Optional[str], via: str) -> "Checkpoint":
        """A new checkpoint begins; returned as well as kept, since a step on another thread may close it at once
        (a save on a background thread)."""
        self._save_began = time.time()
        self._fetch_rng = None  # the next step's batch state is taken after the save: draws around it are told apart
        self.saves += 1
        ckpt = self.checkpoint = Checkpoint(self.saves)
        fields: Dict[str, object] = {}
        if self.journal is not None:
            fields["op"] = self.journal.ops
        self.emit(
            "save-begin",
            save=self.saves,
            step=self.step,
            path=None if path is None else os.path.abspath(path),
            via=via,
            digest=self._digest(),
            rng=self._rng(),
            **fields,
        )
        fault = self.fault
        if fault is not None and fault.save == self.saves and self.journal is not None:
            if fault.kind == "disk-full":
                self.journal.quota = fault.free_bytes
                self.emit("fault", fault=fault.kind, save=fault.save, free_bytes=fault.free_bytes)
            elif fault.at_op is not None:
                self._op_base = self.journal.ops
                self.journal.on_op = self._count_op
        return ckpt

    def _digest(self) -> str:
        try:
            return fingerprint.exact_digest(self.params())
        except Exception:  # parameters it cannot read (a sharded tensor): the save is still recorded
            return "unavailable"

    def _rng(self) -> Dict[str, str]:
        """The streams' states now (a save begins, an RNG restore returned); empty when one cannot be read."""
        try:
            return self.streams.fingerprints()
        except Exception:  # a stream it cannot read: the event is still sent
            return {}

    def _look_into(self, obj: object, ckpt: "Checkpoint") -> None:
        """What the saved object holds: judged with the checkpoint's other objects when the checkpoint ends."""
        from chaosckpt import checkpoint_content  # at the first save, not in every process's start-up

        scan = checkpoint_content.scan(obj)
        ckpt.scans.append(scan)
        ckpt.whole = checkpoint_content.whole(scan)

    def _judge(self, ckpt: "Checkpoint") -> List[object]:
        """Findings about the whole checkpoint against the streams the loop draws from (view bloat, RNG states)."""
        from chaosckpt import checkpoint_content

        if not ckpt.scans:
            return []
        scans = ckpt.scans + [checkpoint_content.scan(state) for state in _json_states(ckpt.folders, self._save_began)]
        return checkpoint_content.findings(checkpoint_content.merge(scans), streams=sorted(self._drawn))

    @contextlib.contextmanager
    def recording_save(self, path: Optional[str], via: str, obj: object) -> Iterator["_Save"]:
        """One save call of the open checkpoint; ``save-file`` with its counts and any error however it ends."""
        ckpt = self.save_begin(path, via, obj)
        save = _Save(ckpt)
        base = (ckpt.bytes, ckpt.writes)
        error: Optional[BaseException] = None
        try:
            yield save
        except BaseException as exc:
            error = exc
            raise
        finally:
            writer = save.writer
            counts = (writer.bytes, writer.writes) if writer else (ckpt.bytes - base[0], ckpt.writes - base[1])
            self.save_end(ckpt, path, via, *counts, error, writer.ends if writer else None)

    def save_end(self, ckpt: "Checkpoint", path: Optional[str], via: str, nbytes: int, writes: int,
                 error: Optional[BaseException], ends: Optional[list] = None) -> None:
        self.saving = False
        self.saving_via = self.saving_path = None
        if error is not None and ckpt.error is None:
            ckpt.error = _one_line(error)
        if via == MEMORY:
            return  # it wrote no file: the file its bytes go to reports them (``writers.FileTally``)
        self.emit(
            "save-file",
            save=ckpt.index,
            path=None if path is None else os.path.abspath(path),
            via=via,
            ok=error is None,
            bytes=nbytes,
            writes=writes,
            error=None if error is None else _one_line(error),
            **({"whole": True} if ckpt.whole else {}),
            **({} if ends is None else {"ends": ends}),
        )

    def close_checkpoint(self) -> None:
        """The burst of saves ended (a step began, or the process exits): the checkpoint is complete as written."""
        ckpt, self.checkpoint = self.checkpoint, None
        if ckpt is None:
            return
        for tally in ckpt.tallies:
            tally.close_out()
        content: List[object] = []
        try:
            content = self._judge(ckpt)
        except Exception:  # an object it cannot judge: the checkpoint is still recorded
            pass
        self.emit("save-end", save=ckpt.index, ok=ckpt.error is None, bytes=ckpt.bytes, writes=ckpt.writes,
                  error=ckpt.error, **({"content": content} if content else {}))
        if self.horizon is not None:
            self.horizon.saved(ckpt.index, self.step, self._save_began)
        fault = self.fault
        if fault is not None and fault.after_save and fault.save == ckpt.index and ckpt.error is None:
            self._halt_pending = {"after_save": True, "step": self.step}

    def loaded(self, path: Optional[str], result: object, error: Optional[BaseException]) -> None:
        keys = [str(k) for k in list(result)[:50]] if isinstance(result, dict) else None
        sets: List[Dict[str, object]] = []
        if error is None and isinstance(result, dict) and self.enabled:
            try:
                from chaosckpt.agent import tensorsets  # at the first load, not in every process's start-up

                sets = tensorsets.tensor_sets(result)
            except Exception:  # tensors it cannot sample: the load is still recorded
                sets = []
        self.emit(
            "load",
            path=None if path is None else os.path.abspath(path),
            ok=error is None,
            error=None if error is None else _one_line(error),
            keys=keys,
            **({"sets": sets} if sets else {}),
        )
        self._need_digest = True
        self._sample_next = self._sample_next or bool(sets)

    def restored(self, what: str, obj: object) -> None:
        if what in ("module", "optimizer"):
            self.emit("restore", what=what, name=type(obj).__name__)
            self._need_digest = True
        elif self.step == 0:  # RNG restores mid-run (activation checkpointing, fork_rng) are not resumes
            self.emit("restore", what=what, name=type(obj).__name__, rng=self._rng())
        fault = self.fault
        if fault is not None and fault.kind == "eval" and what == "module" and not self._eval_done:
            self._eval_done = True
            obj.eval()
            self.emit("fault", fault="eval", save=fault.save, module=type(obj).__name__)

    def uncaught(self, exc: BaseException) -> None:
        """The job is ending on an exception: which one, after how many steps, through which frames."""
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)[-30:]
        self.close_checkpoint()
        self.emit("uncaught", exc=type(exc).__name__, error=_one_line(exc), step=self.step,
                  frames=[{"file": f.filename, "line": f.lineno, "func": f.name} for f in frames])

    def hello(self) -> None:
        argv = list(getattr(sys, "orig_argv", sys.argv))
        self.emit(
            "hello",
            rank=self.rank,
            local_rank=_env_int("LOCAL_RANK"),
            world_size=_env_int("WORLD_SIZE"),
            argv=argv[:20],
            cwd=os.getcwd(),
            python=sys.version.split()[0],
            torch=torch.__version__,
            fault=None if self.fault is None else self.fault.__dict__,
        )


class Checkpoint:
    """The checkpoint being written: every save call between two steps, with its bytes and writes counted across them."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.bytes = 0
        self.writes = 0
        self.error: Optional[str] = None
        self.scans: List[Dict[str, object]] = []
        self.whole = False  # the current call saves a whole training state (model and optimizer) in one file
        self.folders: set = set()  # where its files went: JSON state written beside them is part of it
        self.tallies: List[Any] = []  # files the job opened into it (``writers.FileTally``)
        self.payloads: List[Payload] = []  # its save calls into memory, whose bytes a file write may carry


MEMORY = "memory"
"""The ``via`` of a save call into an in-memory buffer (``io.BytesIO``): no file system sees its bytes."""

PAYLOAD_HEAD = 4096
"""Bytes kept from the start of a checkpoint serialized into memory, to recognise the file write that carries it."""


class Payload(NamedTuple):
    """A save call's bytes serialized into memory: their first bytes, and whether they hold a whole training state."""

    head: bytes
    whole: bool


class _Save:
    """One save call in progress: its checkpoint's index, and the counting writer once there is one (none for DCP)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint
        self.writer = None


JSON_STATE_LIMIT = 1 << 20


def _json_states(folders: set, since: float) -> List[object]:
    """The JSON files written into the checkpoint's folders since it began (a Trainer's trainer_state.json):
    their step counters are part of the checkpoint."""
    import json

    states = []
    for folder in sorted(folders):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
                if st.st_mtime < since - 1 or st.st_size > JSON_STATE_LIMIT:
                    continue
                with open(path, encoding="utf-8") as f:
                    states.append(json.load(f))
            except (OSError, ValueError):
                continue
    return states


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    return int(value) if value is not None and value.isdigit() else None
