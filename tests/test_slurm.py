"""chaosckpt on a real Slurm cluster: two slurmd nodes, each a machine of its own (network, host name, hosts file)
on this host, and a controller (``slurm_cluster.SlurmCluster``). Trials are submitted with ``sbatch`` from the
cluster's login machine, as a user would, and their verdicts read from the job's output.

The two-node trial is the DDP job of tests/test_nodes.py, one rank per node with node-local checkpoint folders:
node 1 loses power just after save 2 returns, every run stops 3 steps past the point it matters for."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, processes_of, project_with

pytestmark = pytest.mark.e2e

DDP_JOB = Path(__file__).resolve().parent / "jobs" / "ddp_job.py"
NODE_POWER_LOSS = str(REPO / "scenarios" / "node-power-loss.toml")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running two-node cluster, stopped afterwards with nothing of it left; skipped where it cannot run."""
    from slurm_cluster import SlurmCluster

    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    why = cluster.start()
    if why:
        pytest.skip(why)
    try:
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftovers() == []


def _batch(slurm, folder: Path, name: str, lines: str, nodes: int = 2) -> dict:
    """Submit a batch script that runs ``lines`` in ``folder`` with ``sbatch --wait``; the JSON it printed."""
    script = folder / f"{name}.sbatch"
    out = folder / f"{name}.out"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --output={out}
#SBATCH --error={folder / f'{name}.err'}
set -eu
cd {folder}
{lines}
""")
    done = slurm.run(["sbatch", "--wait", "--parsable", str(script)], timeout=600, cwd=folder)
    assert out.exists(), done.stderr
    text = out.read_text()
    assert text.strip(), (folder / f"{name}.err").read_text()
    return json.loads(text)


def test_a_two_node_trial_submitted_with_sbatch_runs_its_nodes_with_srun_and_names_the_node(slurm, tmp_path):
    """Inside the allocation chaosckpt needs no node options: the nodes are the allocation's, node 0 the batch
    host. A job whose every node fsyncs resumes from step 8 on both ranks; one whose node 1 never fsyncs loses
    node 1's acknowledged checkpoint, named by its Slurm host name."""
    project = project_with(tmp_path, DDP_JOB)
    run = (f"export GLOO_SOCKET_IFNAME=ccv\n{sys.executable} -m chaosckpt run --scenario {NODE_POWER_LOSS} --json "
           f"--timeout 120 --horizon 3 --out {tmp_path / 'results'} train.py -- --ckpt per-rank --node-local")

    robust = _batch(slurm, project, "robust", run)["trials"][0]
    assert robust["status"] == "passed", robust["headline"]
    assert [(r["rank"], r["node"], r["host"], r["recovered_step"]) for r in robust["ranks"]] == [
        (0, 0, "node0", 8), (1, 1, "node1", 8)]

    lazy = _batch(slurm, project, "lazy", run + " --no-fsync-node 1")["trials"][0]
    assert lazy["status"] == "failed"
    lost = next(f for f in lazy["findings"] if f["kind"] == "acknowledged-checkpoint-lost")
    assert lost["node"] == 1 and lost["message"].startswith("on node 1 (node1), the checkpoint of step 8")
    assert all(run["survivors"] == 0 for t in (robust, lazy) for run in t["runs"])
    assert processes_of(tmp_path) == []
    assert slurm.queue() == []
