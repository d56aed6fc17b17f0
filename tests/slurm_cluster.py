"""A real Slurm cluster on one host for the tests: munged, slurmctld and one slurmd per node, each daemon in a
network namespace of its own (``netns.Namespaces``: the controller in the hub, node K in node K's namespace) and in
UTS and mount namespaces of its own, with its own host name and an ``/etc/hosts`` naming every machine of the
cluster bound over the host's. A generated ``slurm.conf`` puts every file the daemons keep in one temporary folder.
Commands that talk to the cluster (``sbatch``, ``squeue``, chaosckpt's Slurm executor) run through ``client()``,
as on a login machine: in the hub's network namespace with the cluster's host names."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

from netns import Namespaces

NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun", "unshare", "nsenter", "ip")
CONTROLLER = "slurmctl"


def _network(namespace: str) -> List[str]:
    """Enter a named network namespace only (``ip netns exec`` would also hide the host's ``/sys/fs/cgroup``,
    which slurmd reads)."""
    return ["nsenter", f"--net=/run/netns/{namespace}"]


def _machine(hostname: str, hosts: Path, command: List[str]) -> List[str]:
    """``command`` on a machine of its own: a new UTS and mount namespace with ``hostname`` and the cluster's hosts."""
    script = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
    return ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script, "machine",
            str(hosts), hostname, *command]


class SlurmCluster:
    """Two (or ``nodes``) Slurm nodes and a controller; ``start()`` says why it cannot run here, else None."""

    def __init__(self, root: Path, nodes: int = 2, cpus: int = 2):
        self.root, self.cpus = root, cpus
        self.nets = Namespaces(nodes)
        self.names = [f"node{k}" for k in range(nodes)]
        self.daemons: List[subprocess.Popen] = []

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> Dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def client(self, command: List[str]) -> List[str]:
        """``command`` run as from the cluster's login machine (the controller's network, its host names)."""
        return _network(self.nets.hub) + _machine("login", self.root / "hosts", command)

    def run(self, command: List[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.client(command), env=self.env(), capture_output=True, text=True,
                              timeout=timeout, **kwargs)

    def start(self) -> Optional[str]:
        missing = [c for c in NEEDED if shutil.which(c) is None]
        if missing:
            return f"Slurm is not installed here ({', '.join(missing)} missing; apt-get install slurm-wlm munge)"
        if os.geteuid() != 0:
            return "a Slurm cluster of daemons needs root (namespaces, a munge key, slurmd running jobs as users)"
        why = self.nets.create()
        if why:
            return why
        self._write_files()
        self._spawn(["munged", "-F", "-f", f"--key-file={self.root / 'munge.key'}",
                     f"--socket={self.root / 'munge.sock'}", f"--pid-file={self.root / 'munged.pid'}",
                     f"--log-file={self.root / 'munged.log'}", f"--seed-file={self.root / 'munged.seed'}"])
        self._wait_for(lambda: (self.root / "munge.sock").exists(), "munged")
        self._spawn(_network(self.nets.hub) + _machine(CONTROLLER, self.root / "hosts",
                                                       ["slurmctld", "-D", "-i", "-f", str(self.conf)]))
        for k, name in enumerate(self.names):
            self._spawn(_network(self.nets.node(k)) + _machine(name, self.root / "hosts",
                                                               ["slurmd", "-D", "-N", name, "-f", str(self.conf)]))
        try:
            self._wait_for(self._nodes_idle, "every node to be idle")
        except RuntimeError as exc:
            self.stop()
            return str(exc)
        return None

    def _write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for folder in ("state", "spool", *(f"spool/{name}" for name in self.names)):
            (self.root / folder).mkdir(exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        lines = ["127.0.0.1 localhost", f"{self.nets.hub_address} {CONTROLLER} login"]
        lines += [f"{self.nets.address(k)} {name}" for k, name in enumerate(self.names)]
        (self.root / "hosts").write_text("\n".join(lines) + "\n")
        self.conf.write_text(self._conf())

    def _conf(self) -> str:
        r = self.root
        nodes = "\n".join(f"NodeName={name} NodeAddr={self.nets.address(k)} CPUs={self.cpus} State=UNKNOWN"
                          for k, name in enumerate(self.names))
        return f"""ClusterName=chaosckpt
SlurmctldHost={CONTROLLER}({self.nets.hub_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r / 'munge.sock'}
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=3600
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'spool' / 'slurmd.%n.pid'}
SlurmctldLogFile={r / 'slurmctld.log'}
SlurmdLogFile={r / 'spool' / 'slurmd.%n.log'}
SlurmdSpoolDir={r / 'spool' / '%n'}
StateSaveLocation={r / 'state'}
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
{nodes}
PartitionName=debug Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

    def _spawn(self, command: List[str]) -> None:
        log = open(self.root / f"{Path(command[0]).name}-{len(self.daemons)}.out", "w")
        self.daemons.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                             start_new_session=True))
        log.close()

    def _nodes_idle(self) -> bool:
        shown = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=20)
        states = dict(line.split() for line in shown.stdout.splitlines() if line.strip())
        return all(states.get(name, "").startswith("idle") for name in self.names)

    def _wait_for(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [d.args[0] for d in self.daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the Slurm cluster did not start: waiting for {what}, "
                                   f"{'exited: ' + ', '.join(dead) if dead else 'timed out'} (logs in {self.root})")
            time.sleep(0.3)

    def queue(self) -> List[str]:
        """The jobs queued or running, as ``id name state``."""
        shown = self.run(["squeue", "-h", "-o", "%i %j %T"], timeout=20)
        return [line for line in shown.stdout.splitlines() if line.strip()]

    def leftovers(self) -> List[str]:
        """Daemons still running and namespaces still there after ``stop()``."""
        alive = [" ".join(map(str, d.args)) for d in self.daemons if d.poll() is None]
        return alive + self.nets.leftovers()

    def stop(self) -> None:
        """Cancel every job, stop every daemon and remove the namespaces."""
        if self.daemons:
            self.run(["scancel", "--full", "--user", "root"], timeout=20)
        for daemon in self.daemons:
            if daemon.poll() is None:
                os.killpg(daemon.pid, 15)
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, 9)
                daemon.wait()
        self.nets.remove()
