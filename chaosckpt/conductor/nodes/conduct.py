"""The conductor side of a multi-node run: start a node on every machine, give each its part of the job,
mirror their event streams into the run's events folder (so every step of a trial reads them as a local
run's), and end the run on every node at once: the fault, the horizon, the timeout, or a lost node."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import psutil

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.nodes import wire as wires
from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.launcher import RunResult, RunSpec

KILL_WAIT_S = 15.0
"""How long a node has to report its tree killed before it is called lost."""
BYE_WAIT_S = 5.0
FAILED_GRACE_S = 20.0
"""How long the other nodes have to end once one node's job failed."""


@dataclass
class NodeFault:
    """A fault of one whole node: with a crash ``model``, a power loss (the node rewrites its own checkpoint
    folders ``roots`` under it when the job is killed); without one, the node's loss (only its tree is
    killed when the fault fires, and the other nodes run on until they end)."""

    node: int
    model: Optional[str]
    roots: List[str]


@dataclass
class NodesResult(RunResult):
    lost: List[int] = field(default_factory=list)
    """Nodes that did not connect, or stopped answering before the run ended."""
    joined: List[int] = field(default_factory=list)
    """Nodes that connected."""
    node_of: List[Tuple[int, int]] = field(default_factory=list)
    """(pid, node) for every process that sent events: two nodes' processes may have the same pid."""
    rewritten: Optional[Dict] = None
    """The power-cut node's report: ``files`` (path -> bytes kept) and ``native`` (files no model judges)."""


class Peer:
    """One connected node, as its reader thread keeps it up to date."""

    def __init__(self, node: int, wire: wires.Wire, events_dir: Path) -> None:
        self.node, self.wire, self.events_dir = node, wire, events_dir
        self.rc: Optional[int] = None
        self.killed: Optional[Dict] = None
        self.gone = False
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            while True:
                message = self.wire.recv()
                kind = message.get("t")
                if kind == "events":
                    name = Path(str(message["file"])).name
                    if not (name.startswith("events.") and name.endswith(".jsonl")):
                        continue
                    with open(self.events_dir / f"{name[:-len('.jsonl')]}.n{self.node}.jsonl", "a") as f:
                        f.write(message["data"])
                elif kind == "flag":
                    name = Path(str(message["name"])).name
                    if name.startswith((protocol.FAULT_FLAG_PREFIX, protocol.STOP_FLAG_PREFIX)):
                        (self.events_dir / f"{name}.n{self.node}").touch()  # pids of two nodes may be equal
                elif kind == "exit":
                    self.rc = message.get("rc")
                elif kind == "killed":
                    self.killed = message
        except (OSError, wires.WireError, KeyError, TypeError):
            pass
        finally:
            self.gone = True

    @property
    def lost(self) -> bool:
        """The connection closed before the node said how its tree ended."""
        return self.gone and self.rc is None and self.killed is None


def _send(peer: Peer, message: wires.Message) -> None:
    """Send to a node; one whose connection broke is found lost by its reader."""
    try:
        peer.wire.send(message)
    except OSError:
        pass


def ranks_stopped(events_dir: Path) -> bool:
    """Every rank of every node has reached the horizon: its process raised its stop flag. (Unlike a local
    run's check, this cannot ask whether another machine's process is still alive; a rank that ended
    without stopping holds the others only until ``STOP_HOLD_S``.)"""
    flagged = {p.name[len(protocol.STOP_FLAG_PREFIX):] for p in protocol.fault_flags(events_dir, protocol.STOP_FLAG_PREFIX)}
    return all(".".join(path.name.split(".")[2:4]) in flagged for path in protocol.event_files(events_dir)
               if path.name.split(".")[1].isdigit())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def launch(spec: RunSpec, cluster: Cluster, cut: Optional[NodeFault] = None) -> NodesResult:
    """Run ``spec`` on every node of ``cluster`` to its end, a fired fault, its horizon, its timeout or a lost
    node; every node's tree is gone afterwards, and so are the node processes."""
    with launcher.subreaper():
        return _Run(spec, cluster, cut).run()


class _Run:
    def __init__(self, spec: RunSpec, cluster: Cluster, cut: Optional[NodeFault]) -> None:
        self.spec, self.cluster, self.cut = spec, cluster, cut
        self.events_dir = spec.log_dir / "events"
        self.token = secrets.token_hex(32)
        self.mark = uuid.uuid4().hex
        """Carried by every job process on every node, so strays of a node that died are found here."""
        self.node_mark = uuid.uuid4().hex
        """Carried by the node processes this conductor started."""
        self.peers: Dict[int, Peer] = {}
        self.node_lost = False
        self.procs: List[Tuple[subprocess.Popen, psutil.Process]] = []

    def run(self) -> NodesResult:
        spec = self.spec
        self.events_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        timed_out = fault_fired = stopped = False
        lost: List[int] = []
        try:
            listener = socket.create_server((self.cluster.listen, 0), backlog=self.cluster.nnodes * 2)
        except OSError as exc:
            raise UsageError(f"--listen {self.cluster.listen}: chaosckpt cannot listen there ({os.strerror(exc.errno) if exc.errno else exc}); "
                             "give an address of this machine that the nodes can reach") from None
        try:
            self._start_nodes(listener)
            lost = self._connect(listener, started)
            if not lost:
                self._give_work()
            failed_at = None
            while not lost:
                if all(p.rc is not None or p.killed is not None for p in self.peers.values()):
                    break
                if failed_at is None and any(p.rc for p in self.peers.values()):
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > FAILED_GRACE_S:
                    break  # as torchrun ends a job whose worker failed, the other nodes are not waited for
                lost = [n for n, p in self.peers.items() if p.lost]
                if protocol.fault_flags(self.events_dir):
                    fault_fired = True
                    if not self._lose_node():
                        launcher.wait_before_kill(spec, self.events_dir, started, spec.hold)
                        break
                if protocol.fault_flags(self.events_dir, protocol.STOP_FLAG_PREFIX):
                    stopped = True
                    launcher.wait_before_kill(spec, self.events_dir, started, ranks_stopped, launcher.STOP_HOLD_S)
                    break
                if time.monotonic() - started > spec.timeout_s:
                    timed_out = True
                    break
                if spec.watch is not None:
                    spec.watch(self.events_dir, time.monotonic() - started)
                time.sleep(launcher.POLL_S)
        finally:
            survivors, unanswered, rewritten = self._end()
            listener.close()
        lost = sorted(set(lost) | set(unanswered))
        fault_fired = fault_fired or bool(protocol.fault_flags(self.events_dir))
        rcs = [p.rc for n, p in self.peers.items() if not (self.node_lost and n == self.cut.node)]
        ended = [rc for rc in rcs if rc is not None]
        returncode = next((rc for rc in ended if rc), 0 if rcs and len(ended) == len(rcs) and not lost else -9)
        node_of = [(int(p.name.split(".")[2]), int(p.name.split(".")[3][1:])) for p in protocol.event_files(self.events_dir)]
        return NodesResult(spec, returncode, time.monotonic() - started, timed_out, fault_fired, survivors, stopped,
                           lost=lost, joined=sorted(self.peers), node_of=node_of,
                           rewritten=rewritten)

    def _lose_node(self) -> bool:
        """For a node's loss, kill that node's tree alone (once); whether the run goes on without it."""
        if self.cut is None or self.cut.model is not None or self.cut.node not in self.peers:
            return False
        peer = self.peers[self.cut.node]
        if not self.node_lost:
            self.node_lost = True
            _send(peer, {"t": "kill", "power_loss": None})
        return True

    def _start_nodes(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        conductor = f"{self.cluster.listen}:{port}"
        env = {**os.environ, protocol.ENV_MARK: self.node_mark}
        for node in range(self.cluster.nnodes):
            log = open(self.spec.log_dir / f"node{node}.log", "wb")
            with log:
                proc = subprocess.Popen(self.cluster.node_argv(node, conductor), stdin=subprocess.PIPE, stdout=log,
                                        stderr=subprocess.STDOUT, env=env, start_new_session=True)
            self.procs.append((proc, psutil.Process(proc.pid)))
            try:
                proc.stdin.write((self.token + "\n").encode())
                proc.stdin.close()
            except OSError:
                pass  # the node command died at once; it is reported as a node that never connected

    def _connect(self, listener: socket.socket, started: float) -> List[int]:
        """Accept the nodes until all are in; the ones still missing at the deadline."""
        deadline = started + min(self.cluster.connect_s, self.spec.timeout_s)
        while len(self.peers) < self.cluster.nnodes and time.monotonic() < deadline:
            if all(proc.poll() is not None for node, (proc, _) in enumerate(self.procs) if node not in self.peers):
                break  # every node still missing has exited: it will never connect
            listener.settimeout(max(0.05, min(0.5, deadline - time.monotonic())))
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                continue
            accepted = wires.accept(sock, self.token)
            if accepted is None:
                continue
            wire, node = accepted
            if node in self.peers or not 0 <= node < self.cluster.nnodes:
                wire.close()
                continue
            self.peers[node] = Peer(node, wire, self.events_dir)
            self.peers[node].thread.start()
        return [n for n in range(self.cluster.nnodes) if n not in self.peers]

    def _give_work(self) -> None:
        master_port = _free_port() if not self.cluster.hosts else 29500 + secrets.randbelow(400)
        for node, peer in sorted(self.peers.items()):
            cut = self.cut if self.cut is not None and self.cut.node == node else None
            _send(peer, {
                "t": "start", "name": self.spec.name, "argv": self.cluster.job_argv(self.spec.argv, node, master_port),
                "cwd": str(self.spec.cwd), "log_dir": str(self.spec.log_dir / f"node{node}"),
                "timeout_s": self.spec.timeout_s, "fault": self.spec.fault, "stop": self.spec.stop, "maps": self.spec.maps,
                "env": {k: self.cluster.fill(v, node, master_port) for k, v in self.spec.env.items()},
                "roots": cut.roots if cut else [], "mark": self.mark,
            })

    def _end(self):
        """Kill every node's tree (the power-cut node rewrites its folders), then the node processes."""
        for node, peer in self.peers.items():
            cut = self.cut is not None and self.cut.node == node
            if peer.killed is not None:
                continue
            _send(peer, {"t": "kill", "power_loss": self.cut.model if cut else None})
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and any(p.killed is None and not p.gone for p in self.peers.values()):
            time.sleep(launcher.POLL_S)
        survivors: List[int] = []
        for peer in self.peers.values():
            survivors += (peer.killed or {}).get("survivors", [])
            _send(peer, {"t": "bye"})
        deadline = time.monotonic() + BYE_WAIT_S
        while time.monotonic() < deadline and any(p.poll() is None for p, _ in self.procs):
            time.sleep(launcher.POLL_S)
        for proc, root in self.procs:
            survivors += launcher.kill_tree(root, self.node_mark) + launcher.kill_tree(root, self.mark)
            launcher.reap(proc)
        for peer in self.peers.values():
            peer.wire.close()
        self._outputs()
        unanswered = [n for n, p in self.peers.items() if p.killed is None]
        rewritten = None
        if self.cut is not None and self.cut.node in self.peers:
            report = self.peers[self.cut.node].killed or {}
            rewritten = {"files": report.get("files", {}), "native": report.get("native", [])}
        return sorted(set(survivors)), unanswered, rewritten


    def _outputs(self) -> None:
        """The run's stdout.log and stderr.log: each node's (its tail), every line prefixed with its node, the
        nodes whose job failed last, so the log's last line (the verdict's error excerpt) is a failing node's."""
        order = sorted(self.peers.items(), key=lambda item: (bool(item[1].rc), item[0]))
        for name in ("stdout", "stderr"):
            with open(self.spec.log_dir / f"{name}.log", "w") as out:
                for node, peer in order:
                    for line in str((peer.killed or {}).get(name, "")).splitlines():
                        out.write(f"[node {node}] {line}\n")


def lost_detail(result: NodesResult, cluster: Cluster) -> str:
    """The lost nodes and the processes that were running on them, in words."""
    parts = []
    for node in result.lost:
        pids = sorted({pid for pid, n in result.node_of if n == node})
        if node not in result.joined:
            ran = " (it never connected)"
        elif pids:
            ran = f" (its processes {', '.join(map(str, pids))} sent no word since)"
        else:
            ran = " (it stopped answering before its job sent an event)"
        parts.append(cluster.name(node) + ran)
    return (f"the {result.spec.name} run lost {'; '.join(parts)}: a node that stops answering cannot be judged; see "
            f"{result.spec.log_dir}/node<K>.log")
