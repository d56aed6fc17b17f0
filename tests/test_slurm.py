"""chaosckpt on a real Slurm cluster: two slurmd nodes, each a machine of its own (network, host name, hosts file)
on this host, and a controller (``slurm_cluster.SlurmCluster``). Trials are submitted with ``sbatch`` from the
cluster's login machine, as a user would, and their verdicts read from the job's output.

The two-node trial is the DDP job of tests/test_nodes.py, one rank per node with node-local checkpoint folders:
node 1 loses power just after save 2 returns, every run stops 3 steps past the point it matters for."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, processes_of, project_with

from chaosckpt.conductor.runs import cache

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


def _wait_for_job(slurm, job_id: str, deadline: float) -> str:
    """Wait until the Slurm job has ended; its final state. Asked every 0.5 s: ``sbatch --wait`` asks after 2, 10,
    42 s, then every 32 s (its backoff grows while MinJobAge allows), up to half a minute after a job ended."""
    while time.monotonic() < deadline:
        shown = slurm.run(["scontrol", "-o", "show", "job", job_id], timeout=20)
        state = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f).get("JobState", "")
        if state and state not in ACTIVE:
            return state
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {job_id} did not end: {slurm.queue()}")


ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
          "STAGE_OUT")


def _batch(slurm, folder: Path, name: str, lines: str, nodes: int = 2) -> dict:
    """Submit a batch script that runs ``lines`` in ``folder`` and wait for it to end; the JSON it printed."""
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
    done = slurm.run(["sbatch", "--parsable", str(script)], timeout=60, cwd=folder)
    assert done.returncode == 0, done.stderr
    _wait_for_job(slurm, done.stdout.strip().split(";")[0], time.monotonic() + 600)
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


def _suite_project(tmp_path: Path, config: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "naive_train.py", project / "train.py")
    (project / "chaosckpt.toml").write_text('command = "train.py --epochs 2"\n' + config)
    return project


THREE = """
[[scenarios]]
scenario = "kill9-mid-save"
params = { save = 1 }
[[scenarios]]
scenario = "enospc"
[[scenarios]]
scenario = "eval-left-on"
"""


def _verdicts(document: dict) -> dict:
    return {t["id"]: (t["status"], (t["result"] or {}).get("outcome"), (t["result"] or {}).get("recovered_step"))
            for t in document["trials"]}


def test_a_suite_sent_to_slurm_gathers_the_verdicts_the_same_suite_gives_on_this_machine(slurm, tmp_path):
    project = _suite_project(tmp_path, THREE)
    local = subprocess.run([sys.executable, "-m", "chaosckpt", "suite", "-j", "2", "--json", "--out", "local"],
                           cwd=project, capture_output=True, text=True, timeout=600)
    assert local.returncode == 1, local.stderr
    on_slurm = slurm.run([sys.executable, "-m", "chaosckpt", "suite", "--executor", "slurm", "--json", "--out",
                          str(project / "slurm")], timeout=600, cwd=project)
    assert on_slurm.returncode == 1, on_slurm.stderr
    assert _verdicts(json.loads(on_slurm.stdout)) == _verdicts(json.loads(local.stdout))
    assert set(_verdicts(json.loads(local.stdout)).values()) >= {("failed", "crashed", None)}
    folder = next((project / "slurm").glob("*-suite*"))
    submitted = [json.loads(p.read_text())["job_id"] for p in sorted(folder.glob("trials/*/slurm.json"))]
    assert len(submitted) == 3 and all(job.isdigit() for job in submitted)
    assert all(f"chaosckpt-{t.name}" in _job_names(slurm, submitted) for t in (folder / "trials").iterdir())
    reference_job = json.loads((folder / "reference-job" / "slurm.json").read_text())["job_id"]
    assert "chaosckpt-reference-job" in _job_names(slurm, [reference_job]), "the reference ran as a job of its own"
    assert "reference run: the job once without a fault, which every trial is compared with, as a Slurm job" in (
        on_slurm.stderr)
    assert set(json.loads((folder / "reference-job" / "done.json").read_text())) == {"cached"}
    assert cache.damage(folder / "reference") is None, "the job left the suite a whole reference"
    assert slurm.queue() == [] and processes_of(project) == []


def _job_names(slurm, job_ids) -> str:
    return "\n".join(slurm.run(["scontrol", "-o", "show", "job", job]).stdout for job in job_ids)


def _start_suite(slurm, project: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(slurm.client([sys.executable, "-m", "chaosckpt", "suite", "--executor", "slurm", *args]),
                            cwd=project, env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _running_jobs(slurm, folder_glob, project: Path, count: int, deadline: float) -> list:
    """Wait until ``count`` trials' Slurm jobs run; their ids."""
    while time.monotonic() < deadline:
        running = [line.split()[0] for line in slurm.queue() if line.endswith("RUNNING")]
        if len(running) >= count and len(list(project.glob(folder_glob))) >= count:
            return running
        time.sleep(0.3)
    raise AssertionError(f"no {count} running trial jobs: {slurm.queue()}")


def test_a_cancelled_trial_is_inconclusive_and_a_killed_suite_is_resumed_by_waiting_for_its_jobs(slurm, tmp_path):
    """One trial's job is cancelled by hand while the suite runs: that trial is INCONCLUSIVE naming the Slurm state.
    Then chaosckpt itself is SIGKILLed while the other trials' jobs run: they run on, and --resume waits for them
    instead of submitting them again."""
    project = _suite_project(tmp_path, THREE)
    proc = _start_suite(slurm, project)
    running = _running_jobs(slurm, "chaosckpt-results/*/trials/*/slurm.json", project, 2, time.monotonic() + 300)
    folder = next((project / "chaosckpt-results").glob("*-suite*"))
    jobs = {json.loads(p.read_text())["job_id"]: p.parent for p in folder.glob("trials/*/slurm.json")}
    cancelled, kept = running[0], running[1]
    assert slurm.run(["scancel", cancelled]).returncode == 0
    deadline = time.monotonic() + 60
    while not (jobs[cancelled] / "result.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.kill()
    proc.communicate(timeout=30)
    assert any(line.startswith(f"{kept} ") for line in slurm.queue()), "the trials' jobs went with chaosckpt"

    resumed = slurm.run([sys.executable, "-m", "chaosckpt", "suite", "--resume", "--json"], timeout=600, cwd=project)

    trials = {t["id"]: t for t in json.loads(resumed.stdout)["trials"]}
    assert len(trials) == 3
    assert resumed.returncode == (1 if any(t["status"] == "failed" for t in trials.values()) else 2), resumed.stderr
    assert json.loads((jobs[kept] / "slurm.json").read_text())["job_id"] == kept  # waited for, not submitted again
    gone = trials[jobs[cancelled].name]
    assert (gone["status"], gone["result"]["reason"]) == ("inconclusive", "slurm-job-ended")
    assert gone["result"]["headline"].startswith(
        f"INCONCLUSIVE {gone['result']['scenario']}: the trial's Slurm job ended without a verdict: Slurm job {cancelled} "
        "was cancelled before the trial had a verdict")
    assert slurm.queue() == [] and processes_of(project) == []


def test_an_interrupted_suite_cancels_every_job_it_submitted(slurm, tmp_path):
    project = _suite_project(tmp_path, THREE)
    proc = _start_suite(slurm, project)
    _running_jobs(slurm, "chaosckpt-results/*/trials/*/slurm.json", project, 1, time.monotonic() + 300)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "continue it with: chaosckpt suite --resume" in err
    assert slurm.queue() == []
    assert processes_of(project) == []
