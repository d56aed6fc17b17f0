"""Start-up of the agent in a job process: decide whether to record, then hook torch's import.

Called from the generated ``sitecustomize``. Costs a few environment look-ups in
processes that are not to be recorded, and about a millisecond in those that are:
torch is patched only when the job imports it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Callable, Optional

from chaosckpt import protocol

_started = False


def _argv() -> list:
    return list(getattr(sys, "orig_argv", sys.argv))


def role() -> str:
    """What this process is: ``training`` (record it), or why it is left alone."""
    if protocol.ENV_RUN_DIR not in os.environ:
        return "off"
    argv = _argv()
    if "--multiprocessing-fork" in argv:
        return "mp-child"
    if len(argv) > 2 and argv[1] == "-c" and "multiprocessing" in argv[2]:
        return "mp-helper"
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return "launcher"
        if not arg.startswith("-"):
            if os.path.basename(arg) in ("torchrun", "torchrun.py"):
                return "launcher"
            break
    return "training"


class ImportHook:
    """Finds module ``name`` through the other finders and runs ``on_loaded`` right after it executes."""

    def __init__(self, name: str, on_loaded) -> None:
        self._name = name
        self._on_loaded = on_loaded

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self._loader  # the module keeps its real loader
        self._loader.exec_module(module)
        try:
            self._on_loaded()
        except Exception as exc:  # the job must run even if the agent cannot; the conductor sees no events
            sys.stderr.write(f"chaosckpt agent failed to hook {self._name}: {type(exc).__name__}: {exc}\n")


def when_imported(name: str, on_loaded) -> None:
    """Run ``on_loaded`` once module ``name`` is imported: now if it already is."""
    if name in sys.modules:
        on_loaded()
    else:
        sys.meta_path.insert(0, ImportHook(name, on_loaded))


def _rank() -> Optional[int]:
    value = os.environ.get("RANK")
    return int(value) if value is not None and value.isdigit() else None


def _install() -> None:
    import json

    import atexit

    from chaosckpt.agent import faults, fileops, interpose, moves, patches, threads, writers
    from chaosckpt.agent.channel import EventWriter
    from chaosckpt.agent.stopping import Horizon
    from chaosckpt.agent.recorder import Recorder

    spec = os.environ.get(protocol.ENV_FAULT)
    fault = faults.ArmedFault.from_json(spec) if spec else None
    rank = _rank()
    run_dir = os.environ[protocol.ENV_RUN_DIR]
    stop = os.environ.get(protocol.ENV_STOP)
    rec = Recorder(EventWriter(run_dir, rank), rank, fault, Horizon(json.loads(stop)) if stop else None)
    interpose.install(rec)
    threads.install(rec)
    when_imported("torch.distributed.checkpoint", lambda: interpose.install_dcp(rec))
    when_imported("torch.distributed.checkpoint.state_dict", lambda: interpose.install_dcp_state_dict(rec))
    when_imported(patches.DCP_PROCESS, lambda: interpose.install_dcp_process(rec))
    if fault is not None and fault.track is not None:  # every rank journals its files, not just the faulted one
        import tempfile

        tracked = [*fault.track, tempfile.gettempdir()]  # the job's own, which chaosckpt put in its sandbox
        rec.journal = fileops.Journal(rec.emit, tracked, os.path.join(run_dir, "keep"))
        rec.journal.open_save = lambda: None if rec.checkpoint is None else rec.checkpoint.index
        fileops.install(rec.journal)
    moves.install(rec)  # how these nest with the journal's and the guard's patches: patches.LAYERS
    writers.install(rec)
    when_imported("safetensors.torch", lambda: interpose.install_safetensors(rec))
    os.register_at_fork(after_in_child=rec.disable)
    atexit.register(rec.at_exit)
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        rec.guarded(rec.uncaught, value)
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook
    rec.hello()


def checkpoint_process(install: Callable[[], None], original: Callable) -> Callable:
    """DCP's checkpoint process (``async_save`` in process mode) starts serving: the agent records it, for it
    writes the rank's checkpoints. Other multiprocessing children (DataLoader workers) are left alone."""
    def serve(*args, **kwargs):
        try:
            install()
        except Exception as exc:  # the job must run even if the agent cannot
            sys.stderr.write(f"chaosckpt agent failed to start: {type(exc).__name__}: {exc}\n")
        return original(*args, **kwargs)

    return serve


def _helper_hook() -> None:
    from chaosckpt.agent import patches

    patches.install("dcp-helper", _install)


def start() -> None:
    """Idempotent entry point: hook torch's import in training processes, nothing elsewhere."""
    global _started
    if not _started:
        from chaosckpt.agent import guard

        guard.name_refusals()
        if protocol.ENV_WRITE_ROOTS in os.environ:
            guard.install(os.environ[protocol.ENV_WRITE_ROOTS].split(os.pathsep))
        if protocol.ENV_RUN_DIR in os.environ:
            from chaosckpt.agent import refusals
            from chaosckpt.agent.channel import EventWriter

            refusals.install(EventWriter(os.environ[protocol.ENV_RUN_DIR], _rank()).emit)
    if not _started and role() == "mp-child":
        from chaosckpt.agent import patches

        _started = True
        when_imported(patches.DCP_PROCESS, _helper_hook)
    if _started or role() not in ("training", "launcher"):
        return
    _started = True
    from chaosckpt.agent import inputs, watchdog

    watchdog.start()
    inputs.start()
    if role() == "training":
        when_imported("torch", _install)
