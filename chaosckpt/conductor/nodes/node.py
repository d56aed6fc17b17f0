"""The node side: ``chaosckpt node`` runs on one machine of a job, around that machine's launcher.

It connects to the conductor (the per-trial token comes on its first line of stdin, never on a command
line), starts the job's local process tree with the agent injected exactly as a local run does, streams
the tree's event files and flags to the conductor as they grow, and on the conductor's word kills the
whole local tree, reports survivors and, for a power loss of this node, rewrites this node's own
checkpoint folders. A node that loses its conductor kills its tree: nothing outlives the trial.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Set

import psutil

from chaosckpt import protocol
from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.nodes import wire as wires
from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.launcher import RunSpec
from chaosckpt.conductor.runs.runlog import RunLog

PUMP_S = 0.02
TAIL_BYTES = 64 * 1024


class NodeRun:
    """One run's local process tree on this node and the stream of its events."""

    def __init__(self, wire: wires.Wire, node: int, start: Dict) -> None:
        self.wire = wire
        self.node = node
        self.spec = RunSpec(start["name"], start["argv"], Path(start["cwd"]), Path(start["log_dir"]),
                            float(start["timeout_s"]), start.get("fault"), start.get("env") or {},
                            stop=start.get("stop"), maps=start.get("maps") or [], layers=f"node{self.node}")
        self.roots: List[str] = start.get("roots") or []
        self.events_dir = self.spec.log_dir / "events"
        self.events_dir.mkdir(parents=True, exist_ok=True)
        self.mark = str(start.get("mark") or uuid.uuid4().hex)
        self.disk = crash.Disk.scan(self.roots, str(self.events_dir / "keep")) if self.roots else None
        self.offsets: Dict[str, int] = {}
        self.flags: Set[str] = set()
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.exit_sent = False
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        try:
            self.proc, self.out_log, self.err_log = launcher.spawn(self.spec, self.events_dir, self.mark)
        except OSError as exc:
            (self.spec.log_dir / "stderr.log").write_text(
                f"chaosckpt node {self.node}: cannot start {self.spec.argv[0]} in {self.spec.cwd}: {exc.strerror or exc}\n")
            self.exit_sent = True
            self.wire.send({"t": "exit", "rc": 127})
            return
        self.root = psutil.Process(self.proc.pid)
        threading.Thread(target=self._stream, daemon=True).start()

    def _stream(self) -> None:
        while not self.finished.is_set():
            try:
                self.pump()
            except OSError:
                return  # the conductor is gone; the command loop kills the tree
            time.sleep(PUMP_S)

    def pump(self) -> None:
        """Send what the event files gained since the last pump (whole lines only), new flags, and the exit."""
        with self.lock:
            exited = self.proc is not None and self.proc.poll() is not None
            for path in protocol.event_files(self.events_dir):
                sent = self.offsets.get(path.name, 0)
                if os.stat(path).st_size <= sent:
                    continue
                with open(path, "rb") as f:
                    f.seek(sent)
                    data = f.read()
                whole = data[: data.rfind(b"\n") + 1]
                if whole:
                    self.wire.send({"t": "events", "file": path.name, "data": whole.decode("utf-8", "replace")})
                    self.offsets[path.name] = sent + len(whole)
            for prefix in (protocol.FAULT_FLAG_PREFIX, protocol.STOP_FLAG_PREFIX):
                for flag in protocol.fault_flags(self.events_dir, prefix):
                    if flag.name not in self.flags:
                        self.flags.add(flag.name)
                        self.wire.send({"t": "flag", "name": flag.name})
            if exited and not self.exit_sent:
                self.exit_sent = True
                self.wire.send({"t": "exit", "rc": self.proc.returncode})

    def kill_tree(self) -> List[int]:
        """SIGKILL the local tree (the launcher's kill: root, descendants, marked strays); the survivors."""
        self.finished.set()
        if self.proc is None:
            return []
        survivors = launcher.kill_tree(self.root, self.mark)
        launcher.reap(self.proc)
        self.out_log.close()
        self.err_log.close()
        return survivors

    def kill(self, power_loss: Optional[str]) -> Dict:
        """Kill the tree, send the last events; for ``power_loss`` (a crash model), rewrite this node's
        checkpoint folders."""
        survivors = self.kill_tree()
        self.pump()
        report: Dict = {"t": "killed", "survivors": survivors,
                        **{name: _tail(self.spec.log_dir / f"{name}.log") for name in ("stdout", "stderr")}}
        if power_loss and self.disk is not None:
            entries, native = crash.power_cut(self.disk, RunLog.read(self.events_dir).ops(), power_loss, self.roots,
                                              self.spec.cwd)
            report["files"] = {e.path: e.length for e in entries}
            report["native"] = native
        return report


def _tail(path: Path) -> str:
    """The end of one of the tree's output files, for the conductor's copy."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def serve(wire: wires.Wire, node: int) -> int:
    """Take the conductor's orders until it says goodbye; the tree is always gone afterwards."""
    run: Optional[NodeRun] = None
    try:
        while True:
            message = wire.recv()
            kind = message.get("t")
            if kind == "start" and run is None:
                run = NodeRun(wire, node, message)
                run.start()
            elif kind == "kill":
                wire.send(run.kill(message.get("power_loss")) if run is not None else {"t": "killed", "survivors": []})
                run = None
            elif kind == "bye":
                return 0
    except (OSError, wires.WireError):
        return 3
    finally:
        if run is not None:
            run.kill_tree()
        wire.close()


def main(conductor: str, node_rank: int) -> int:
    """Serve node ``node_rank`` of the trial whose conductor listens at ``conductor``; the exit status for the shell."""
    token = sys.stdin.readline().strip()
    if not token:
        print("chaosckpt node: no token on stdin: the conductor writes the trial's token as the first line", file=sys.stderr)
        return 2
    try:
        wire = wires.connect(conductor, token, node_rank)
    except (OSError, wires.WireError) as exc:
        print(f"chaosckpt node: cannot reach the conductor at {conductor}: {getattr(exc, 'strerror', None) or exc}; "
              "check that this machine can reach that address (chaosckpt run --listen)", file=sys.stderr)
        return 3
    with launcher.subreaper():
        return serve(wire, node_rank)
