"""Where a job's nodes are and how each is started: ``--nnodes``, ``--hosts`` or the Slurm allocation,
and a ``--node-cmd`` template (``ssh {host}``, ``srun -N1 -n1 -w {host}``) that prefixes the node command.
Inside a Slurm job of several nodes the nodes are the allocation's, each started with ``srun``; elsewhere,
without a template, every node is a separate process group on this machine."""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.runs import invocation

PLACEHOLDERS = ("{node_rank}", "{nnodes}", "{master_addr}", "{master_port}", "{host}")
"""What chaosckpt fills in, per node, in the node command and in the job's command."""
LOCAL = "127.0.0.1"
SRUN = "srun --nodes=1 --ntasks=1 --overlap --kill-on-bad-exit=0 -w {host}"
"""How a node starts inside a Slurm allocation: one task on its machine, sharing the batch step's CPUs."""


@dataclass
class Cluster:
    """The nodes of a multi-node job and how the conductor reaches them."""

    nnodes: int
    hosts: List[str] = field(default_factory=list)
    """One per node; empty: every node on this machine."""
    node_cmd: Optional[str] = None
    """The template that starts a node's command on its machine; None: a local process group."""
    listen: str = LOCAL
    """The address the nodes reach the conductor at."""
    connect_s: float = 60.0
    """How long every node has to connect before the run is called off, naming the missing ones."""

    def host(self, node: int) -> str:
        return self.hosts[node] if self.hosts else LOCAL

    def fill(self, text: str, node: int, master_port: int) -> str:
        values = {"{node_rank}": str(node), "{nnodes}": str(self.nnodes), "{master_addr}": self.host(0),
                  "{master_port}": str(master_port), "{host}": self.host(node)}
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    def node_argv(self, node: int, conductor: str) -> List[str]:
        """The command that runs ``chaosckpt node`` for ``node``, through the template when there is one."""
        prefix = [self.fill(t, node, 0) for t in shlex.split(self.node_cmd)] if self.node_cmd else []
        return prefix + [sys.executable, "-m", "chaosckpt", "node", "--conductor", conductor, "--node-rank", str(node)]

    def job_argv(self, argv: Sequence[str], node: int, master_port: int) -> List[str]:
        return [self.fill(a, node, master_port) for a in argv]

    def name(self, node: int) -> str:
        """A node as the verdict names it."""
        return f"node {node}" + (f" ({self.hosts[node]})" if self.hosts else "")


def expand_nodelist(text: str) -> List[str]:
    """Slurm's compressed host list (``gpu[01-03,07],login``) as host names, in order."""
    hosts: List[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,]*)", text):
        prefix, ranges, suffix = match.groups()
        if not prefix and not ranges:
            continue
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            for n in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{n:0{len(first)}d}{suffix}")
    return hosts


def in_allocation(environ: Dict[str, str]) -> bool:
    """Whether this process runs inside a Slurm job (``sbatch``, ``salloc``) that lists its nodes."""
    return bool(environ.get("SLURM_JOB_ID") and environ.get("SLURM_JOB_NODELIST"))


def from_options(nnodes: Optional[int], hosts: Optional[str], node_cmd: Optional[str], listen: Optional[str],
                 environ: Optional[Dict[str, str]] = None) -> Optional[Cluster]:
    """The cluster the command line asks for, None for a job on this machine alone."""
    environ = dict(os.environ) if environ is None else environ
    allocated = in_allocation(environ) and hosts is None and node_cmd is None
    if allocated and nnodes is None:
        nnodes = int(environ.get("SLURM_JOB_NUM_NODES") or len(expand_nodelist(environ["SLURM_JOB_NODELIST"])))
        nnodes = None if nnodes < 2 else nnodes
    if nnodes is None and hosts is None and node_cmd is None:
        return None
    if allocated:
        node_cmd = SRUN
    names = [h for h in (hosts or "").split(",") if h]
    if hosts is None and node_cmd is not None and environ.get("SLURM_JOB_NODELIST"):
        names = expand_nodelist(environ["SLURM_JOB_NODELIST"])
    if nnodes is None:
        nnodes = len(names)
    if nnodes < 1:
        raise UsageError(f"--nnodes {nnodes} is invalid: give the number of machines, 1 or more (or --hosts a,b)")
    if names and len(names) < nnodes:
        raise UsageError(f"--nnodes {nnodes} needs {nnodes} hosts and {len(names)} were given; list one per node "
                         "in --hosts, or run inside a Slurm allocation of that many nodes")
    if node_cmd is not None and not names and "{host}" in node_cmd:
        raise UsageError(f"--node-cmd {node_cmd!r} names {{host}} but no host is known; give --hosts a,b or run "
                         "inside a Slurm allocation (SLURM_JOB_NODELIST)")
    if node_cmd is not None:
        try:
            shlex.split(node_cmd)
        except ValueError as exc:
            raise UsageError(f"--node-cmd {node_cmd!r} is not a valid command line: {exc}") from None
    if listen is None:
        listen = socket.gethostname() if names else LOCAL
    return Cluster(nnodes, names[:nnodes], node_cmd, listen)


def with_nodes(command: List[str], nproc: Optional[int], cluster: Optional[Cluster]) -> List[str]:
    """The job's command for ``--nproc`` ranks on each node of ``cluster``: ``SCRIPT.py`` through
    torch.distributed.run with a static rendezvous at node 0 and each node's rank filled in by chaosckpt;
    a launcher given after -- runs as given, with the placeholders it names filled in."""
    if cluster is None:
        return invocation.with_ranks(command, nproc if nproc != 1 else None)
    if command[0] != sys.executable or not command[1].endswith(".py"):
        if not any(p in a for a in command for p in PLACEHOLDERS):
            raise UsageError("--nnodes runs a SCRIPT.py; to start ranks your own way, give the launcher after -- "
                             "with {node_rank}, {nnodes}, {master_addr} and {master_port} where chaosckpt fills them in")
        return command
    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc {nproc} is invalid: give the number of ranks on each node, 1 or more")
    nproc = nproc or 1
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--nnodes",
            str(cluster.nnodes), "--node_rank", "{node_rank}", "--master_addr", "{master_addr}", "--master_port",
            "{master_port}", *command[1:]]
