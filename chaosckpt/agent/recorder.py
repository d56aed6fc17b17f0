"""What the agent records about the training loop: steps, losses, parameter digests, random streams, saves, loads."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional

import torch

from chaosckpt import protocol
from chaosckpt.agent import faults, fingerprint, held, manifest
from chaosckpt.agent.bursts import MEMORY, Bursts, Checkpoint
from chaosckpt.agent.channel import EventWriter
from chaosckpt.agent.consumed import Consumed
from chaosckpt.agent.faults import ArmedFault
from chaosckpt.agent.stopping import Horizon
from chaosckpt.agent.modes import Modes
from chaosckpt.agent.streams import Streams
from chaosckpt.agent.threads import Handoff

if TYPE_CHECKING:  # imported by the runtime only when a fault asks for the journal
    from chaosckpt.agent.fileops import Journal


def _one_line(exc: BaseException) -> str:
    message = str(exc).strip()
    if not message:
        return type(exc).__name__
    return f"{type(exc).__name__}: {message}".splitlines()[0][:300]


class Recorder(Bursts):
    """The per-process recording state, fed by the hooks that ``interpose`` installs."""

    def __init__(self, writer: EventWriter, rank: Optional[int], fault: Optional[ArmedFault],
                 horizon: Optional[Horizon] = None) -> None:
        super().__init__()
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
        self._state_due = True  # the next step records the manifest (``manifest``): the first, after a save or load,
        # and after work handed to a thread (a background save's state)
        self.scalers = manifest.Scalers()
        self.consumed = Consumed(self.on_batch)
        self._sample_next = False  # a checkpoint's tensor sets were loaded: the next step samples each parameter
        self._stepper: Optional[int] = None  # the thread that steps the primary optimizer: the training loop's
        self.hidden_steps = 0  # inside get_state_dict's optimizer state initialisation: its step is no training step
        self.journal: Optional["Journal"] = None
        self.streams = Streams()
        self.modes = Modes()
        self._last_rng: Dict[str, str] = {}
        self._drawn: set = set()  # streams whose state moved between two steps: the loop draws from them
        self._halt_pending: Optional[dict] = None
        self._held = False  # the training thread waits where the fault's background save expects it (``_hold``)
        self._strike: Optional[str] = None  # the fault is striking: "halt" (held until the kill) or "done"
        self._preempted = False  # a preemption's place was reached: its signal lands once
        self._digest_due = False  # a thread or task was handed work: the next step's digest is of its state
        self._handed_digest: Optional[tuple] = None  # (step, digest) taken for a background save
        self.background_error: Optional[BaseException] = None  # the fault raised in a background save, its fate open
        self._error_carriers: List[BaseException] = []  # it, and what the task it failed raised for it
        self._error_thread: Optional[int] = None
        self._op_base = 0
        self._eval_done = False
        self.handoffs = 0  # states handed to DCP's checkpoint process
        self._spawned = multiprocessing.parent_process() is not None  # started by multiprocessing (DCP's helper)

    def fire(self, **fields: object) -> None:
        """The armed fault's moment has come: halt for the conductor's SIGKILL, wait for its preemption signal, or
        fail the write with ENOSPC.
        The event names the files the process was still writing and the copy it was inside, if any: a killed
        process sends no ``save-file`` or ``save-move`` event for them."""
        fields = {"fault": self.fault.kind, "save": self.fault.save, **fields, **self._in_progress()}
        ckpt = self.checkpoint
        if ckpt is not None and ckpt.background is not None:
            fields.update(self._in_flight(ckpt))
        if self.fault.kind == "halt":
            self._strike = "halt"
            faults.halt(self.writer, **fields)
        if self.fault.kind == "preempt":
            if self._preempted:
                return  # another thread's write reached the place first: the signal lands once
            self._preempted = True
            faults.preempt(self.writer, **fields)
            self._strike = "done"  # a training thread held for a background save goes on once the signal is sent
            return
        self._strike = "done"
        self.emit("fault", **fields)
        error = faults.disk_full_error()
        if ckpt is not None and ckpt.background is not None:
            self.background_error, self._error_carriers = error, [error]
            self._error_thread = threading.get_ident()
        raise error

    def _in_flight(self, ckpt: "Checkpoint") -> Dict[str, object]:
        """A fault in a background save the reference run placed (``handed_step``): the writer waits at its place
        until the training thread is held at its step (``_hold``; at most ``faults.IN_FLIGHT_WAIT`` seconds: a
        job that waits for its save takes no step); the thread and the steps taken are part of the fault's event."""
        if self.fault.handed_step is not None:
            deadline = time.monotonic() + faults.IN_FLIGHT_WAIT
            while not self._held and self._strike is None and time.monotonic() < deadline:
                time.sleep(0.005)
        return {"thread": ckpt.background, "steps_in_flight": self.step - ckpt.step, "training_step": self.step,
                **({"held": True} if self._held else {})}

    def _hold(self, fault: ArmedFault) -> None:
        """The training thread has taken ``steps_in_flight`` steps since the fault's background save was handed
        its state: it waits here until the fault strikes (a kill ends the process here) or the save ends without
        it, so the training stands at the same point in every faulted run."""
        self._held = True
        deadline = time.monotonic() + faults.IN_FLIGHT_WAIT
        while self._strike != "done" and (self._strike == "halt" or time.monotonic() < deadline) and not (
                self.saves >= fault.save and fault.save not in self._unfinished):
            time.sleep(0.005)
        self._held, self._strike = False, "done"

    def _in_progress(self) -> Dict[str, object]:
        ckpt = self.checkpoint
        writing = [self.saving_path] if self.saving and self.saving_path is not None else []
        for tally in ckpt.tallies if ckpt is not None else ():
            if not tally.reported and tally.path is not None and tally.path not in writing and tally.live():
                writing.append(tally.path)
        return {**({"writing": writing} if writing else {}), **({"inside": dict(self.moving)} if self.moving else {})}

    def at_exit(self) -> None:
        """The process exits: its open checkpoints are as complete as they will get (one a background thread
        is still writing never lands: ``save-end`` says so); a pending halt fires now."""
        if self.enabled:
            self.guarded(self.close_checkpoint)
            for ckpt in list(self._unfinished.values()):
                self.guarded(self._finish, ckpt, self._in_flight_at_exit(ckpt))
            for handed in self.unbegun():
                self.guarded(self._never_begun, handed)
            self.awaiting.clear()
        self.fire_pending()
        self.emit("exit", step=self.step, **self._error_fate("unobserved"))

    def _never_begun(self, handed: "Handoff") -> None:
        """The process exits before a thread handed a save at ``handed.step`` began writing it (a slow store it
        waits for): a checkpoint in flight from its hand-over that never landed."""
        self.saves += 1
        self.emit("save-begin", save=self.saves, step=handed.step, path=None, via="handoff",
                  digest=self._digest_at(handed.step), rng={}, thread=handed.thread or handed.origin)
        self.emit("save-end", save=self.saves, ok=False, bytes=0, writes=0, unfinished=True, waiting=True,
                  error="handed to its thread and not yet begun when the process exited")

    def _error_fate(self, fate: str) -> Dict[str, object]:
        """The error a fault raised in a background save, the first time its fate is known: ``observed`` (a
        future's result raised it, or the job ended on it) or ``unobserved`` (the job ended without it)."""
        error, self.background_error = self.background_error, None
        return {} if error is None else {"background_error": {"error": _one_line(error), "fate": fate}}

    def observed(self, exc: Optional[BaseException]) -> None:
        """The job looked at ``exc`` (a future's result or exception, the exception it ended on): if it is the
        background save's fault, or one it caused, the job noticed it."""
        if self.background_error is not None and exc is not None and any(
                _carries(exc, carrier) for carrier in self._error_carriers):
            self.emit("background-error", **self._error_fate("observed")["background_error"])

    def task_failed(self, exc: BaseException) -> None:
        """A background task ends on ``exc``: when the fault failed that task's save, ``exc`` (whatever the save
        made of the error: DCP's ``CheckpointException``) carries it to whoever reads the task's future."""
        if self.background_error is not None and threading.get_ident() == self._error_thread:
            self._error_carriers.append(exc)

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

    def optimizers(self) -> List[torch.optim.Optimizer]:
        """The live optimizers, in creation order."""
        return [opt for opt in (ref() for ref in self._optimizers) if opt is not None]

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
            if self._stepper in (None, threading.get_ident()):  # the losses are the training thread's to drop
                self._pending_losses.clear()

    def on_scaled(self, scaled: torch.Tensor, loss: torch.Tensor, scaler: object) -> None:
        """GradScaler.scale produced ``scaled`` from ``loss``: record the unscaled value at backward, and the
        scaler as part of the training state."""
        self._scaled[id(scaled)] = loss.detach()
        self.scalers.saw(scaler)

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
            self._stepper = threading.get_ident()
        elif self._primary() is not optimizer:
            return
        if self._digest_due:
            self._digest_due = False
            self._handed_digest = (self.step, self._digest())
            self._state_due = True  # a save handed to a thread is of this state, as one made on this thread
        self._end_step()  # a step whose optimizer.step() raised: booked without waiting for it
        if self.horizon is not None and self.horizon.due(self.step):
            faults.halt(self.writer, event="stop", flag=protocol.STOP_FLAG_PREFIX, step=self.step)
        if self.fault is not None and self.fault.handed_step is not None and self._strike is None and (
                self.step == self.fault.handed_step + (self.fault.steps_in_flight or 0)):
            self._hold(self.fault)
        self.step += 1
        if self._by_step:  # the training stepped on: nothing more is handed over for a kept checkpoint's step
            for kept in [c for c in self._by_step.values() if not c.holders]:
                self.guarded(self._let_go, kept)
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
        """A DataLoader hands out a batch, or the root module's forward begins (a job with no DataLoader): at the
        step's first, note the device streams before its forward draws."""
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
        consumed = self.consumed.take()
        if consumed is not None:
            fields["input"] = consumed
        in_eval = self.modes.in_eval()
        if in_eval:
            fields["eval"] = in_eval
        if self.step == 1 and self.streams.aliases:
            fields["aliases"] = self.streams.aliases
        if self._need_digest:
            fields["digest"] = fingerprint.exact_digest(params)
            self._need_digest = False
        if self._state_due:
            self._state_due = False
            fields["state"] = manifest.take(self.optimizers(), self.modes.live_roots(), self.scalers.live())
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
        burst = self._burst
        ckpt = burst.checkpoint
        if ckpt is not None and ckpt.background is not None and not ckpt.busy and ckpt.idle_since < self.step:
            self.close_checkpoint()  # a saver thread's next checkpoint: the training stepped since its last
            ckpt = None
        burst.saving, burst.via, burst.path = True, via, None if path is None else os.path.abspath(path)
        ckpt = ckpt or self._open_checkpoint(path, via)
        self._busy(ckpt, 1)
        ckpt.whole = False
        if obj is not None and self.step:
            self.guarded(self._look_into, obj, ckpt)
        if path is not None and via != "dcp":
            ckpt.folders.add(os.path.dirname(os.path.abspath(path)))
        if self.journal is not None and path is not None:
            self.journal.track(path if via == "dcp" else os.path.dirname(os.path.abspath(path)))
        return ckpt

    def _open_checkpoint(self, path: Optional[str], via: str) -> "Checkpoint":
        """A new checkpoint begins, this thread's to write. On a background thread its step is the step at which
        the thread (or its task) was handed its work, and its digest the parameters' at that step."""
        background = self._stepper is not None and threading.get_ident() != self._stepper
        step = self._burst.handed_step if background and self._burst.handed_step is not None else self.step
        self._burst.handed_step = None
        handed = self._burst.handoff
        if handed is not None:
            with self._lock:
                self._handed.pop(id(handed), None)
                self._savers.add(handed.origin)
        with self._lock:
            joined = self._by_step.get(step) if background else None
            if joined is not None:  # another task handed work at the same step: one checkpoint, as between steps
                joined.holders += 1
                self._burst.checkpoint = joined
                return joined
        if not background:
            self._fetch_rng = None  # the next step's batch state is taken after the save: draws around it told apart
        with self._lock:
            self.saves += 1
            self._state_due = True
            ckpt = self._burst.checkpoint = self._unfinished[self.saves] = Checkpoint(self.saves, step)
        if background:
            ckpt.background = threading.current_thread().name
            self._by_step[step] = ckpt
        fields: Dict[str, object] = {"thread": ckpt.background} if background else {}
        if self.journal is not None:
            fields["op"] = self.journal.ops
        self.emit(
            "save-begin",
            save=ckpt.index,
            step=step,
            path=None if path is None else os.path.abspath(path),
            via=via,
            digest=self._digest_at(step),
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

    def _digest_at(self, step: int) -> str:
        """The parameters' digest at ``step``: now, or the one the training thread took at its next step (a
        background save that began after the training stepped on)."""
        if step == self.step:
            return self._digest()
        taken = self._handed_digest
        return taken[1] if taken is not None and taken[0] == step else "unavailable"

    def handed_to_process(self, path: Optional[str]) -> None:
        """The training thread hands the state of this step to DCP's checkpoint process, which saves it as its
        next checkpoint: ``save-handoff`` carries the step and digest the conductor gives that checkpoint."""
        self.handoffs += 1
        self.emit("save-handoff", handoff=self.handoffs, step=self.step, digest=self._digest(),
                  path=None if path is None else os.path.abspath(path))

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
        if ckpt.background is not None:
            return  # written while the training moves on: the live state is no longer the one it saves
        if ckpt.held is None:
            ckpt.held = held.Held(held.wanted(self.optimizers(), self.modes.live_roots(), self.scalers.live()))
        ckpt.held.add(obj)

    def _judge(self, ckpt: "Checkpoint") -> List[object]:
        """Findings about the whole checkpoint against the streams the loop draws from (view bloat, RNG states)."""
        from chaosckpt import checkpoint_content

        if not ckpt.scans:
            return []
        scans = ckpt.scans + [checkpoint_content.scan(state) for state in _json_states(ckpt.folders, ckpt.began)]
        found = checkpoint_content.findings(checkpoint_content.merge(scans), streams=sorted(self._drawn))
        lacking = ckpt.held.lacking() if ckpt.held is not None else []
        return [*found, held.finding(lacking)] if lacking else found

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
            if self._stepper is None and self._spawned and not ckpt.busy:
                self.close_checkpoint()  # a helper process that saves what it is sent: each request is one

    def save_end(self, ckpt: "Checkpoint", path: Optional[str], via: str, nbytes: int, writes: int,
                 error: Optional[BaseException], ends: Optional[list] = None) -> None:
        burst = self._burst
        burst.saving, burst.via, burst.path = False, None, None
        self._busy(ckpt, -1)
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
            **({"parts": _parts(ckpt, path)} if via == "dcp" and path is not None else {}),
        )

    def _finish(self, ckpt: "Checkpoint", unfinished: bool = False) -> None:
        """``save-end``: the checkpoint's counts and error, what it holds; ``unfinished``: a thread was still
        writing it when the process exited, so it never landed."""
        self._unfinished.pop(ckpt.index, None)
        if self._by_step.get(ckpt.step) is ckpt:
            del self._by_step[ckpt.step]
        if unfinished:
            self.emit("save-end", save=ckpt.index, ok=False, bytes=ckpt.bytes, writes=ckpt.writes, unfinished=True,
                      error="still being written in the background when the process exited")
            return
        for tally in ckpt.tallies:
            tally.close_out()
        content: List[object] = []
        try:
            content = self._judge(ckpt)
        except Exception:  # an object it cannot judge: the checkpoint is still recorded
            pass
        self.emit("save-end", save=ckpt.index, ok=ckpt.error is None, bytes=ckpt.bytes, writes=ckpt.writes,
                  sizes=ckpt.sizes, error=ckpt.error, **({"content": content} if content else {}))
        if self.horizon is not None:
            self.horizon.saved(ckpt.index, ckpt.step, ckpt.began)
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
        self._need_digest = self._state_due = True
        self._sample_next = self._sample_next or bool(sets)

    def restored(self, what: str, obj: object) -> None:
        if what in ("module", "optimizer"):
            self.emit("restore", what=what, name=type(obj).__name__)
            self._need_digest = self._state_due = True
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
        self.observed(exc)
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
            **({"helper_of": os.getppid()} if self._spawned else {}),
        )


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


def _carries(exc: BaseException, error: BaseException, depth: int = 0) -> bool:
    """Whether ``exc`` is ``error`` or was caused by it: chained (``raise ... from``, or raised while handling
    it), or one of the per-rank failures DCP gathers into a ``CheckpointException`` (a copy that crossed ranks)."""
    if depth > 20:
        return False
    if exc is error or type(exc) is type(error) and exc.args == error.args:
        return True
    failures = getattr(exc, "failures", None)
    inner = [pair[0] for pair in failures.values() if isinstance(pair, tuple) and pair] \
        if isinstance(failures, dict) else []
    chained = [e for e in (exc.__cause__, exc.__context__, *inner) if isinstance(e, BaseException)]
    return any(_carries(e, error, depth + 1) for e in chained)


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    return int(value) if value is not None and value.isdigit() else None


def _parts(ckpt: "Checkpoint", folder: str) -> List[Dict[str, object]]:
    """The files a DCP save wrote in its folder (its shards, ``.metadata.tmp``), each with its bytes and writes: what
    ``file=`` places a fault in, since the save's ``save-file`` names the folder alone."""
    inside = os.path.abspath(folder) + os.sep
    return [{"name": os.path.basename(t.path), "bytes": t.bytes, "writes": t.writes}
            for t in ckpt.tallies if t.path is not None and t.path.startswith(inside)]
