"""Jobs that span machines: the node link, the cluster options, a lost node, and two-node trials.

The two-node trials run the DDP job with one rank per node and node-local checkpoint folders
(ckpt/node<N>): 16 steps, a save after every 4, save 2 interrupted, so the last good step is 4
(rank-epoch-skew) or 8 (a power loss just after save 2 returned); every run stops 3 steps past the
point it matters for (--horizon 3). The local default (every node a
process group on this machine) runs everywhere; the same trials across Linux network namespaces (a
separate network stack per node, gloo between them) run where namespaces can be made.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO, processes_of, project_with, run_chaosckpt

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.nodes import cluster as clusters, conduct, wire
from chaosckpt.conductor.runs.launcher import RunSpec

DDP_JOB = Path(__file__).resolve().parent / "jobs" / "ddp_job.py"
NODE_POWER_LOSS = str(REPO / "scenarios" / "node-power-loss.toml")


def _handshake(token_node: str, token_conductor: str):
    """A real loopback connection: what the conductor and the node each make of the other."""
    server = socket.create_server(("127.0.0.1", 0))
    out = {}

    def node() -> None:
        try:
            out["node"] = wire.connect(f"127.0.0.1:{server.getsockname()[1]}", token_node, 1, timeout_s=5)
        except (OSError, wire.WireError) as exc:
            out["node"] = exc

    thread = threading.Thread(target=node)
    thread.start()
    sock, _ = server.accept()
    accepted = wire.accept(sock, token_conductor)
    thread.join(10)
    server.close()
    return accepted, out["node"]


def test_a_node_holding_the_trials_token_is_let_in_and_a_stranger_is_not():
    accepted, node = _handshake("s3cret", "s3cret")
    assert accepted is not None and accepted[1] == 1 and isinstance(node, wire.Wire)
    node.send({"t": "exit", "rc": 0})
    assert accepted[0].recv() == {"t": "exit", "rc": 0}
    node.close(), accepted[0].close()

    accepted, node = _handshake("guess", "s3cret")
    assert accepted is None and isinstance(node, wire.WireError)


def test_hosts_come_from_the_slurm_allocation_and_each_node_gets_its_rank():
    assert clusters.expand_nodelist("gpu[01-03,07],login") == ["gpu01", "gpu02", "gpu03", "gpu07", "login"]
    cluster = clusters.from_options(None, None, "srun -N1 -n1 -w {host}", "head",
                                    environ={"SLURM_JOB_NODELIST": "gpu[08-09]"})
    assert (cluster.nnodes, cluster.hosts) == (2, ["gpu08", "gpu09"])
    assert cluster.node_argv(1, "head:4000")[:6] == ["srun", "-N1", "-n1", "-w", "gpu09", sys.executable]
    command = clusters.with_nodes([sys.executable, "train.py", "--x"], 4, cluster)
    assert cluster.job_argv(command, 1, 29511)[3:16] == [
        "--nproc_per_node", "4", "--nnodes", "2", "--node_rank", "1", "--master_addr", "gpu08", "--master_port",
        "29511", "train.py", "--x"]
    assert clusters.from_options(None, None, None, None, environ={}) is None
    with pytest.raises(UsageError, match="needs 3 hosts and 2 were given"):
        clusters.from_options(3, "a,b", "ssh {host}", None, environ={})


def test_inside_a_slurm_job_of_several_nodes_each_node_starts_with_srun_on_its_machine():
    job = {"SLURM_JOB_ID": "17", "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_JOB_NUM_NODES": "2"}
    cluster = clusters.from_options(None, None, None, None, environ=job)
    assert (cluster.nnodes, cluster.hosts, cluster.node_cmd) == (2, ["node0", "node1"], clusters.SRUN)
    assert cluster.node_argv(1, "node0:4000")[:8] == ["srun", "--nodes=1", "--ntasks=1", "--overlap",
                                                      "--kill-on-bad-exit=0", "-w", "node1", sys.executable]
    assert clusters.from_options(None, None, None, None, environ={**job, "SLURM_JOB_NUM_NODES": "1",
                                                                  "SLURM_JOB_NODELIST": "node0"}) is None
    assert clusters.from_options(1, None, None, None, environ=job).hosts == ["node0"]
    assert clusters.from_options(2, "a,b", None, None, environ=job).node_cmd is None


def test_bad_node_options_are_one_line_errors(project, tmp_path):
    res = run_chaosckpt(["run", "-s", "rank-epoch-skew", "--nnodes", "2", "--node-cmd", "ssh {host}", "train.py"],
                        cwd=project, env={"SLURM_JOB_NODELIST": ""})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "chaosckpt: error: --node-cmd 'ssh {host}' names {host} but no host is known; give --hosts a,b or run "
        "inside a Slurm allocation (SLURM_JOB_NODELIST)")
    res = run_chaosckpt(["run", "-s", "rank-epoch-skew", "--nnodes", "2", "--listen", "192.0.2.55", "--out",
                         str(tmp_path / "r"), "train.py"], cwd=project)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1] == (
        "chaosckpt: error: --listen 192.0.2.55: chaosckpt cannot listen there (Cannot assign requested address); "
        "give an address of this machine that the nodes can reach")


def test_a_node_that_never_connects_is_named_and_the_others_are_ended(tmp_path):
    """Node 1's command fails before it can connect: the run is called off naming node 1, and node 0 (which
    did connect) is sent home with nothing left running."""
    cluster = clusters.Cluster(2, node_cmd="sh -c 'test {node_rank} = 0 && exec \"$@\"' sh", connect_s=60)
    spec = RunSpec("reference", [sys.executable, "-c", "pass"], tmp_path, tmp_path / "log", 60)
    result = conduct.launch(spec, cluster)
    assert result.lost == [1] and result.survivors == [] and result.duration_s < 30
    assert conduct.lost_detail(result, cluster).startswith("the reference run lost node 1 (it never connected)")
    assert processes_of(tmp_path) == []


def test_a_node_that_dies_mid_run_is_named_and_nothing_it_started_survives(tmp_path):
    """Node 1 is SIGKILLed 3 s into the run, its job still running: the run ends at once as a lost node
    (not at its 60 s timeout), and node 1's orphaned job is found by the run's marker and killed."""
    die = "if [ {node_rank} = 1 ]; then (sleep 3; kill -9 $$) & fi; exec \"$@\""
    cluster = clusters.Cluster(2, node_cmd=f"sh -c '{die}' sh")
    job = [sys.executable, "-c", "import time; time.sleep(60)"]
    result = conduct.launch(RunSpec("faulted", job, tmp_path, tmp_path / "log", 60), cluster)
    assert result.lost == [1] and not result.timed_out and result.duration_s < 30
    assert processes_of(tmp_path) == []


def test_a_job_that_cannot_start_on_a_node_ends_the_run_with_the_reason_in_its_stderr(tmp_path):
    spec = RunSpec("reference", ["no-such-launcher-here"], tmp_path, tmp_path / "log", 60)
    result = conduct.launch(spec, clusters.Cluster(1))
    assert (result.returncode, result.lost, result.survivors) == (127, [], [])
    assert result.stderr.read_text().startswith(  # said by the confinement helper, which execs the job
        "[node 0] chaosckpt: cannot start no-such-launcher-here: No such file or directory")


def _trial(project: Path, out: Path, scenario: str, *args: str, env=None) -> dict:
    res = run_chaosckpt(["run", "--scenario", scenario, "--json", "--out", str(out), "--timeout", "90", *args],
                        cwd=project, env=env)
    assert res.stdout, res.stderr
    return res.trial


@pytest.mark.e2e
def test_two_local_nodes_skewed_rank_on_node_1_agreeing_on_the_newest_common_epoch_pass(tmp_path):
    project = project_with(tmp_path, DDP_JOB)
    trial = _trial(project, tmp_path / "r", "rank-epoch-skew", "--nnodes", "2", "--horizon", "3", "train.py", "--",
                   "--ckpt", "per-rank", "--node-local")

    assert trial["status"] == "passed", trial["headline"]
    assert (trial["fault"]["rank"], trial["fault"]["node"]) == (1, 1)
    assert trial["fault"]["path"] == "ckpt/node1/rank1-epoch1.pt.tmp"
    assert [(r["rank"], r["node"], r["outcome"], r["recovered_step"], r["reproduced"], r["last_step"])
            for r in trial["ranks"]] == [(0, 0, "last-good", 4, True, 7), (1, 1, "last-good", 4, True, 7)]
    assert [run["stopped"] for run in trial["runs"]] == [True, False, True]  # every node stopped at the horizon
    faulted = Path(trial["runs"][1]["events"])
    assert sorted(p.name.split(".", 3)[3] for p in faulted.glob("events.*.jsonl")) == ["n0.jsonl", "n1.jsonl"]
    assert all(run["survivors"] == 0 for run in trial["runs"]) and processes_of(tmp_path) == []


@pytest.fixture
def namespaces():
    """Two node namespaces and a hub, removed afterwards; skipped where they cannot be made."""
    from netns import Namespaces

    made = Namespaces(2)
    why = made.create() if os.geteuid() == 0 else "network namespaces need root"
    if why:
        pytest.skip(why)
    try:
        yield made
    finally:
        made.remove()
        assert made.leftovers() == []


@pytest.mark.e2e
def test_two_nodes_in_network_namespaces_naive_node_local_checkpoints_fail_by_node(tmp_path, namespaces):
    """gloo across two network stacks. Node 1 loses power just after save 2: a job whose every node fsyncs
    resumes from step 8 on both ranks; one whose node 1 never fsyncs loses node 1's acknowledged checkpoint,
    while node 0's folder is kept as the job left it. Rank 1 on node 1 is held mid-save 2 (rank-epoch-skew):
    nodes that each load their own newest file come back from different steps."""
    project = project_with(tmp_path, DDP_JOB)
    net = ["--nnodes", "2", "--hosts", namespaces.hosts(), "--node-cmd", namespaces.node_cmd(),
           "--listen", namespaces.hub_address]
    env = {"GLOO_SOCKET_IFNAME": "ccv"}

    def trial(out: str, *job: str, scenario: str = NODE_POWER_LOSS) -> dict:
        res = subprocess.run([*namespaces.conductor(), sys.executable, "-m", "chaosckpt", "run", "--scenario",
                              scenario, "--json", "--out", str(tmp_path / out), "--timeout", "90", "--horizon", "3",
                              "--keep-sandbox", *net, "train.py", "--", "--ckpt", "per-rank", "--node-local", *job],
                             cwd=project, env={**os.environ, **env}, capture_output=True, text=True, timeout=400)
        assert res.stdout, res.stderr
        return __import__("json").loads(res.stdout)["trials"][0]

    robust = trial("robust")
    assert robust["status"] == "passed", robust["headline"]
    assert (robust["fault"]["node"], robust["fault"]["rank"]) == (1, 1)
    assert [(r["rank"], r["node"], r["host"], r["recovered_step"]) for r in robust["ranks"]] == [
        (0, 0, namespaces.address(0), 8), (1, 1, namespaces.address(1), 8)]
    assert sorted(robust["fault"]["files"]) == ["ckpt/node1/rank1-epoch0.pt", "ckpt/node1/rank1-epoch1.pt"]

    lazy = trial("lazy", "--no-fsync-node", "1")
    assert lazy["status"] == "failed"
    lost = next(f for f in lazy["findings"] if f["kind"] == "acknowledged-checkpoint-lost")
    assert lost["node"] == 1 and lost["path"] == "ckpt/node1/rank1-epoch1.pt"
    assert lost["message"].startswith(f"on node 1 ({namespaces.address(1)}), the checkpoint of step 8")
    assert lazy["fault"]["files"] == {"ckpt/node1/rank1-epoch0.pt": 0, "ckpt/node1/rank1-epoch1.pt": 0}
    node0 = Path(lazy["results_dir"]) / "sandboxes" / "faulted" / "ckpt" / "node0"
    kept = {p.name: p.stat().st_size for p in node0.iterdir() if p.suffix == ".pt"}  # node 0 kept power
    assert "rank0-epoch0.pt" in kept and min(kept.values()) > 9000

    own = trial("own", "--resume", "own", scenario="rank-epoch-skew")
    assert own["status"] == "failed" and own["fault"]["node"] == 1
    split = next(f for f in own["findings"] if f["kind"] == "ranks-disagree")
    assert split["steps"] == {"0": 8, "1": 4}
    assert split["message"].startswith(f"the ranks resumed from different checkpoints: rank 0 on node 0 "
                                       f"({namespaces.address(0)}) from step 8, rank 1 on node 1 "
                                       f"({namespaces.address(1)}) from step 4")
    assert all(run["survivors"] == 0 for t in (robust, lazy, own) for run in t["runs"])
    assert processes_of(tmp_path) == []


def test_a_node_fault_is_placed_by_trigger_node_and_a_bad_node_is_a_usage_error():
    from chaosckpt.conductor import scenario

    loss = scenario.load(str(REPO / "scenarios" / "node-loss.toml"))
    assert (loss.fault, loss.params()["trigger"]) == ("kill", {"save": 2, "fraction": 0.5, "write": None, "node": -1})
    assert scenario.load(NODE_POWER_LOSS, {"node": 0}).params()["trigger"]["node"] == 0
    assert "node" not in scenario.load("power-loss").params()["trigger"]
    with pytest.raises(UsageError, match="trigger.node must be a node rank, or -1 for the last, got -2"):
        scenario.load(NODE_POWER_LOSS, {"node": -2})
