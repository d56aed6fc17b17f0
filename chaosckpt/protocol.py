"""The event protocol between the in-process agent and the conductor.

The agent appends one JSON object a line to ``events.<rank>.<pid>.jsonl`` in the
run directory, one ``write`` per line, so a SIGKILL loses at most the line being
written. The conductor reads the files back, tolerating a torn last line. Both
sides import this module; it uses the standard library only.

Every event carries ``v`` (schema version), ``t`` (event type), ``ts`` (Unix time)
and ``pid``. The event types and their own fields:

``hello``       the agent is live in a process that imported torch.
                ``rank``, ``local_rank``, ``world_size`` (ints or null), ``argv``, ``cwd``,
                ``python``, ``torch`` (version), ``fault`` (the armed fault or null);
                ``helper_of`` (the pid of the rank that started it) in DCP's checkpoint
                process (``async_save`` in process mode), which saves for that rank.
``step``        an optimizer step returned (sent from the post-hook; the fields but
                ``loss`` are measured in the pre-hook, before the step changes anything).
                ``step`` (1-based, counted in this process), ``opt`` (index of the
                optimizer in creation order), ``loss`` (list of floats, one per
                backward since the previous step, a closure's included; empty when none was seen),
                ``pfp`` (exact fingerprint of a fixed sample of every parameter),
                ``psum`` (float sum of that sample, for tolerant comparison),
                ``rng`` (stream name -> state fingerprint: ``torch``, ``python``,
                ``numpy``, ``cuda:N`` and private generators named by where
                they are held), ``eval`` (modules of the optimized model trees
                in eval mode, when any are), ``rng_fetch`` (torch and CUDA stream
                fingerprints when the step's first DataLoader batch was fetched, before
                its forward; after a save, the first batch after it), ``batch`` (CRC-32 of the dataset indices
                of the latest batch a map-style DataLoader drew before the step, when one did: the batch
                it trains on, or with loader workers one fetched ahead), ``input`` (what the model
                consumed: ``CRC.SHAPE`` of a strided sample of the first tensor given to the outermost
                module with parameters in its latest call before the step, ``agent/consumed.py``), ``aliases`` (first step: private stream name -> the other
                places the same generator is held), and, on the first step of
                the process and the first step after a load, ``digest`` (exact,
                order-sensitive digest of all parameters); on the first step after a load whose
                object held tensor sets, ``samples`` (per parameter, the CRC-32 of a fixed
                sample of its values as float32, to match against those sets); on the first
                step of the process, the first after a save begins and the first after a load,
                ``state`` (the manifest of the training state, ``agent/manifest.py``: part name ->
                its digest and plain values; ``optimizer N`` with ``params``, ``with_state``,
                ``digest`` and each group's hyperparameters in ``groups``; ``scheduler N.K`` and
                ``scaler N`` with a ``state_dict``'s plain ``values`` and ``digest``; ``buffers LABEL``
                with each buffer's digest; every part with ``class`` and ``label``).
``save-begin``  a checkpoint started: the first save call after a step. A
                checkpoint is every save call between two steps (a Trainer's model,
                optimizer, scheduler and RNG files). ``save`` (1-based index of the
                checkpoint in this process), ``step`` (optimizer steps completed),
                ``path`` (of its first call, absolute; a file object's name, or null;
                a directory for "dcp"), ``via`` ("path", "fileobj", "memory": into an
                ``io.BytesIO``, "dcp": torch.distributed.checkpoint.save, or "handoff": see
                ``save-end``'s ``waiting``), ``digest`` (of the optimized
                parameters as they are being saved), ``rng`` (stream fingerprints as
                in ``step``, as the save began), ``op`` (journal operations so
                far, when the journal is on), ``thread`` (the thread writing it, when that is not
                the training thread: an asynchronous save, whose ``step`` and ``digest`` are those
                of the step at which the thread or executor task was handed its work).
``save-thread`` a thread other than the training thread writes the bytes the checkpoint serialized
                into memory (a saver thread handed them): ``save``, ``thread``.
``save-handoff`` the training process handed a staged state to DCP's checkpoint process, which
                writes it as its next checkpoint. ``handoff`` (1-based, in this process),
                ``step`` and ``digest`` (of the parameters handed over, as in ``save-begin``),
                ``path`` (the checkpoint's directory, or null).
``save-file``   one save call of the checkpoint returned or raised, or one file written
                into it by another writer (``via`` "write") was closed. ``save``, ``path``,
                ``via``, ``ok``, ``bytes``, ``writes``, ``error`` (one line, or null);
                ``ends`` (where each write ended, in bytes) when the fault spec asks;
                ``whole`` (it holds a whole training state); ``memory`` (the file carries
                bytes a save call serialized into memory; that call sends no event);
                ``parts`` (a DCP save, whose ``path`` is its folder: each file it wrote
                there, ``name``, ``bytes``, ``writes``).
``save-move``   a file was moved, copied or hard-linked while the checkpoint was open (``os.rename``/
                ``replace``, ``shutil.move``, ``shutil.copyfile``, ``os.link``): where a file-object or
                temporary-file save lands, and the other names it gets. ``save``, ``how`` ("rename",
                "move", "copy" or "link"), ``src``, ``dst`` (absolute),
                ``ok`` (returned), ``copied`` (the destination is a new copy, not the source's
                inode: a move whose rename failed across file systems), ``over`` (the
                destination file existed and was rewritten in place).
``save-end``    the checkpoint ended: the next step began, its background thread or task
                ended, or the process exits. ``save``, ``ok`` (every call returned), ``bytes``
                and ``writes`` (across its calls), ``sizes`` (the bytes of each file it wrote, in the
                order their first bytes came), ``error`` (the first call's error, or null),
                ``content`` (findings about its objects taken together: view bloat, RNG states
                missing for streams the loop draws from, no step); ``unfinished`` (a background
                thread was still writing it when the process exited: it never landed);
                ``waiting`` (unfinished and never begun: work handed at ``save-begin``'s step to a
                thread or task whose function saved before, which had not begun writing at the
                exit; its ``save-begin`` has ``via`` "handoff" and no path).
``load``        ``torch.load`` returned or raised. ``path`` (or null), ``ok``,
                ``error`` (one line, or null), ``keys`` (top-level keys of a dict), ``sets``
                (when it held any: each mapping of floating tensors in it, as ``key``, its
                key path, "" for the object itself, ``dtype`` and ``samples``, tensor
                name -> the CRC-32 of the same sample as the step's ``samples``).
``restore``     state was put back into the job. ``what`` ("module", "optimizer",
                "torch-rng", "python-rng"), ``name`` (class name); an RNG restore
                before the first step adds ``rng`` (the process-wide streams'
                fingerprints right after it).
``fault``       the armed fault fired. ``fault`` (kind), ``save``, and where:
                ``write`` (index of the write it fired in), ``bytes`` (bytes
                written by then), ``path``, both counted in the one file the
                fault counts in (``file``, ``file_index``), else across the
                save; or ``op`` (journal
                operation it followed); or ``after_save``; or ``free_bytes``;
                or ``module`` (the restored module an ``eval`` fault put in eval mode).
                ``writing``: the files the process was still writing (their save
                calls had not returned); ``inside``: the move or copy it was in
                (``how``, ``src``, ``dst``), when there was one. In a background save:
                ``thread``, ``steps_in_flight`` (training steps since the save began) and
                ``training_step``; ``held`` (the training thread was held at that step while
                the fault struck, as the spec's ``handed_step`` asks).
``background-error`` the error a fault raised in a background save reached the job (a future's
                ``result()`` or ``exception()``, or the exception the process ends on):
                ``error`` (one line), ``fate`` ("observed").
``uncaught``    the process is ending on an exception. ``exc`` (type name), ``error``
                (one line), ``step`` (steps taken), ``frames`` (``file``, ``line``,
                ``func``, outermost first, the last 30).
``exit``        the job's script has ended (Python's exit handlers run): whatever kills the
                process from here on (a native library crashing in the interpreter's
                shutdown) struck after its work was done. ``background_error``
                (``error``, ``fate`` "unobserved"): a fault's error in a background save the
                job never saw.
``op``          a file operation in a tracked directory (durability journal, on
                only when the fault asks for it). ``op``: ``open`` (``path``,
                ``ino`` [dev, inode], ``created``, ``trunc``, ``size``, ``keep``),
                ``write`` (``path``, ``ino``, ``off``, ``len``: a ``write``, ``pwrite``,
                ``writev``, ``pwritev`` or ``sendfile``), ``fsync`` (``ino``,
                ``size``), ``dirsync`` (``path``), ``rename`` (``src``, ``dst``,
                ``ino``, ``replaced``, ``keep``), ``link`` (``src``, ``path``, ``ino``:
                a hard link, a second name for the inode), ``unlink`` (``path``, ``ino``,
                ``keep``), ``mkdir`` / ``rmdir`` (``path``), ``symlink`` (``path``, ``target``,
                ``ino``); ``n`` numbers them; ``save``, the checkpoint open when it was made.
                Paths relative to a folder's descriptor (``dir_fd``) are made whole.
                ``keep`` is a copy the agent made of data the operation destroyed.
``stop``        the run reached its horizon (``CHAOSCKPT_STOP``) and holds still for the
                conductor's SIGKILL. ``step`` (steps recorded in this process).
``sampler``     one pass of a DataLoader over its sampler ended (exhausted, or
                abandoned: ``complete`` false). ``rank``, ``sampler`` (class
                name), ``size`` (dataset length or null), ``replicas`` and
                ``srank`` (the sampler's num_replicas and rank, or null),
                ``shuffle``, ``epoch`` (the sampler's epoch, or null), ``step``
                (optimizer steps before the pass), ``n`` (indices yielded),
                ``crc`` (CRC-32 of the indices as little-endian int64s: the
                order; both null when the indices are not integers), and ``indices`` (the list, up to 1024) or ``bits``
                (base64 zlib bitmap of the indices seen), ``dups`` ({index:
                extra reads}) and ``head`` (the first indices).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple, TypedDict, cast, get_args

SCHEMA_VERSION = 1

ENV_RUN_DIR = "CHAOSCKPT_RUN_DIR"
"""Directory the agent writes its event files into; the agent is inert without it."""
ENV_FAULT = "CHAOSCKPT_FAULT"
"""The armed fault, a ``FaultSpec`` as ``encode_fault`` writes it (see ``chaosckpt.agent.faults``), absent for none."""
ENV_MARK = "CHAOSCKPT_MARK"
"""A token set on every process of one run, so the conductor can find strays."""
ENV_STOP = "CHAOSCKPT_STOP"
"""JSON ``{"steps": N, "after": [...]}``: stop the job N steps after saves meeting every condition (see
``chaosckpt.agent.stopping``), absent to let it run to its end."""
ENV_CONDUCTOR = "CHAOSCKPT_CONDUCTOR"
"""The pid of the chaosckpt process that started the run; the job stops itself when that process is gone. Inside
a run's PID namespace it is ``1``, the namespace's first process, which dies with chaosckpt."""
ENV_INPUTS = "CHAOSCKPT_INPUTS"
"""``1``: each process writes ``inputs.<pid>.json`` at exit, the files it read from its working directory."""
INPUTS_PREFIX = "inputs."
ENV_WRITE_ROOTS = "CHAOSCKPT_WRITE_ROOTS"
"""``os.pathsep``-joined folders a job may write; set only where no mount namespace confines it."""
ENV_SAMPLER_SKEW = "CHAOSCKPT_SAMPLER_SKEW"
"""JSON ``{"variant": "offset"|"reset", "offset": d, "rank": r}``: skew DistributedSampler epochs (resume runs)."""

FAULT_FLAG_PREFIX = "fault."
"""The agent creates ``fault.<pid>`` in the run directory when a fault halts the job."""
STOP_FLAG_PREFIX = "stop."
"""The agent creates ``stop.<pid>`` in the run directory when the job reached its horizon."""
SIGNALLED_MARK = "signalled"
"""The conductor creates ``signalled`` in the run directory once a preemption's signal is sent: the agent that
raised the fault's flag waits for it, so the signal lands where the fault was placed, then lets the job go on."""

EVENT_TYPES = ("hello", "step", "save-begin", "save-file", "save-move", "save-end", "load", "restore", "fault", "op",
               "sampler", "stop", "uncaught", "exit", "refused", "save-handoff", "save-thread",
               "background-error")

Event = Dict[str, Any]


def events_file_name(rank: int | None, pid: int) -> str:
    """Name of one process's event file."""
    return f"events.{'x' if rank is None else rank}.{pid}.jsonl"


def encode(event: Event) -> bytes:
    """One event as the bytes of one line."""
    return (json.dumps(event, separators=(",", ":"), allow_nan=True) + "\n").encode()


class ProtocolError(Exception):
    """An event file is damaged somewhere other than its last line."""


def read_event_file(path: Path) -> List[Event]:
    """Events of one file, in order; a torn (unterminated or undecodable) last line is dropped."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn_tail = lines.pop()  # text after the last newline: empty unless the writer was killed mid-line
    events: List[Event] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            if number == len(lines) and not torn_tail:
                break
            raise ProtocolError(f"{path}: line {number} is not JSON ({exc})") from None
        if event.get("v") == SCHEMA_VERSION and event.get("t") in EVENT_TYPES:
            events.append(event)
    return events


def event_files(run_dir: Path) -> Iterator[Path]:
    """The event files of a run directory, in a stable order."""
    return iter(sorted(Path(run_dir).glob("events.*.jsonl")))


def fault_flags(run_dir: Path, prefix: str = FAULT_FLAG_PREFIX) -> List[Path]:
    """Flags left by agents whose fault fired (or, with ``STOP_FLAG_PREFIX``, that reached their horizon)
    and which now hold their job still."""
    try:
        names = os.listdir(run_dir)
    except FileNotFoundError:
        return []
    return [Path(run_dir, n) for n in names if n.startswith(prefix)]


# --- The fault spec: what the conductor arms (``CHAOSCKPT_FAULT``) and the agent fires ---------------------

FAULT_SPEC_VERSION = 1
AgentFaultKind = Literal["halt", "preempt", "enospc", "disk-full", "eval"]
FAULT_PLACEMENTS: Dict[str, Tuple[str, ...]] = {
    "halt": ("at_byte", "at_write", "at_op", "after_save"),
    "preempt": ("at_byte", "at_write"),
    "enospc": ("at_byte", "at_write"),
    "disk-full": ("free_bytes",),
    "eval": ("after_load",),
}
"""Where each kind of agent fault can be placed; a spec names exactly one of its kind's placements."""


class _FaultSpecHead(TypedDict):
    v: int
    kind: AgentFaultKind
    save: int


class FaultSpec(_FaultSpecHead, total=False):
    """One armed fault (the agent's ``faults`` module says what each field does); ``v`` is
    ``FAULT_SPEC_VERSION``."""

    at_byte: int
    at_write: int
    at_op: int
    after_save: bool
    free_bytes: int
    after_load: bool
    rank: Optional[int]
    track: List[str]
    write_ends: bool
    file: str
    file_index: int
    steps_in_flight: int
    handed_step: int


_FIELD_TYPES: Dict[str, Tuple[type, ...]] = {
    "at_byte": (int,), "at_write": (int,), "at_op": (int,), "free_bytes": (int,), "rank": (int, type(None)),
    "after_save": (bool,), "after_load": (bool,), "write_ends": (bool,), "track": (list,), "file": (str,),
    "file_index": (int,), "steps_in_flight": (int,), "handed_step": (int,),
}


class FaultSpecError(ValueError):
    """An armed fault spec is malformed (a conductor bug, never user input)."""


def fault_spec(kind: AgentFaultKind, save: int, **fields: Any) -> FaultSpec:
    """A fault spec of this protocol's version."""
    return cast(FaultSpec, {"v": FAULT_SPEC_VERSION, "kind": kind, "save": save, **fields})


def encode_fault(spec: FaultSpec) -> str:
    """The spec as the value of ``CHAOSCKPT_FAULT``."""
    return json.dumps(spec, separators=(",", ":"))


def decode_fault(text: str) -> FaultSpec:
    """The spec ``encode_fault`` wrote, checked: its version, its fields' types, one placement of its kind."""
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise FaultSpecError(f"fault spec is not JSON ({exc})") from None
    if not isinstance(spec, dict) or spec.get("v") != FAULT_SPEC_VERSION:
        raise FaultSpecError(f"fault spec {text} is not of version {FAULT_SPEC_VERSION}")
    unknown = sorted(set(spec) - FaultSpec.__required_keys__ - FaultSpec.__optional_keys__)
    if unknown:
        raise FaultSpecError(f"fault spec {text} has unknown field {unknown[0]}")
    kind, save = spec.get("kind"), spec.get("save")
    if kind not in FAULT_PLACEMENTS or not isinstance(save, int) or isinstance(save, bool) or save < 1:
        raise FaultSpecError(f"bad fault {text}")
    for key, types in _FIELD_TYPES.items():
        value = spec.get(key)
        if key in spec and (not isinstance(value, types) or isinstance(value, bool) and bool not in types):
            raise FaultSpecError(f"fault spec {text}: {key} must be of type {types[0].__name__}")
    placed = [p for p in FAULT_PLACEMENTS[kind] if spec.get(p) is not None and spec.get(p) is not False]
    if len(placed) != 1:
        raise FaultSpecError(f"fault {text} needs exactly one of {', '.join(FAULT_PLACEMENTS[kind])}")
    return cast(FaultSpec, spec)
# ---------------------------------------------------------------------------------------------------------------
# Finding kinds and their severities: what a trial's result may report, named once for the conductor (which
# builds the findings), the agent (whose save-end ``content`` carries some) and the users who silence them.
# ---------------------------------------------------------------------------------------------------------------

Severity = Literal["error", "warning", "note"]
"""``error``: the finding fails the trial by itself; ``warning``: a defect that can cost a resume, whether or not
this trial hit it (a divergence cause among them); ``note``: information that changes no verdict."""

FindingKind = Literal[
    "acknowledged-checkpoint-lost",
    "background-error-unobserved",
    "baseline-nondeterministic",
    "buffers-not-restored",
    "checkpoint-lacks-state",
    "checkpoint-view-bloat",
    "crash-at-exit",
    "epoch-order-differs",
    "epoch-order-replayed",
    "emergency-save-too-long",
    "emergency-save-torn",
    "eval-mode-in-training",
    "exit-0-after-preemption",
    "exit-with-save-in-flight",
    "in-place-save",
    "journal-refused",
    "move-became-copy",
    "no-emergency-save",
    "no-loadable-checkpoint",
    "no-loader-state",
    "no-step-in-checkpoint",
    "non-finite-loss",
    "not-interposed",
    "optimizer-not-restored",
    "ranks-disagree",
    "resume-chose-dcp-without-metadata",
    "resume-chose-incomplete",
    "resume-chose-older",
    "resume-exited",
    "resume-hung",
    "resume-not-resuming",
    "resumed-other-weights",
    "resumed-weights-unmatched",
    "rng-captured-early",
    "rng-drawn-after-restore",
    "rng-not-restored",
    "rng-states-missing",
    "rotation-before-complete",
    "sampler-epoch-never-set",
    "sampler-missing",
    "sampler-overlap",
    "scaler-not-restored",
    "scheduler-not-restored",
    "signal-missed-ranks",
    "step-count-differs",
    "steps-before-load",
    "steps-replayed",
    "steps-skipped",
    "sweep",
    "sweep-untried",
    "torn-checkpoint",
    "torn-copy",
]
"""Every kind of finding a trial reports."""

FINDING_KINDS = get_args(FindingKind)

_ERRORS: tuple[FindingKind, ...] = ("acknowledged-checkpoint-lost", "background-error-unobserved",
                                    "emergency-save-torn", "exit-0-after-preemption", "exit-with-save-in-flight", "no-loadable-checkpoint", "ranks-disagree",
                                    "resume-exited", "resume-hung", "resumed-other-weights")
_NOTES: tuple[FindingKind, ...] = ("crash-at-exit", "not-interposed", "resumed-weights-unmatched", "steps-before-load",
                                   "sweep")
# ``sweep-untried`` (classes of crash state a sweep never resumed) is a warning: no defect of the job, but what was
# not tried could still fail it, so the verdict leaves a trial that would pass inconclusive (``verdict.UNSETTLING``);
# so is ``journal-refused`` (journal operations the rebuild would not replay): a forged journal proves nothing.
SEVERITY: Dict[str, Severity] = {
    kind: "error" if kind in _ERRORS else "note" if kind in _NOTES else "warning" for kind in FINDING_KINDS
}
"""The severity of each finding kind, as reported unless the trial disproved the consequence it predicts."""
