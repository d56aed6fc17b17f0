"""Multi-rank jobs end to end: real torchrun, 2 gloo ranks on CPU, real kills and resumes.

The DDP job has 64 rows, 2 ranks, batch 8: 4 steps per epoch, a save after every
epoch, 4 epochs. Save 2 is interrupted, so the job's last good checkpoint is step 4.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import processes_of, project_with, run_chaosckpt

from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial import coverage
from chaosckpt.protocol import read_event_file

pytestmark = pytest.mark.e2e

DDP_JOB = Path(__file__).resolve().parent / "jobs" / "ddp_job.py"


@pytest.fixture
def ddp_project(tmp_path: Path) -> Path:
    return project_with(tmp_path, DDP_JOB)


def trial_of(project: Path, scenario: str, *args: str, out: Path, timeout: str = "120"):
    res = run_chaosckpt(["run", "--scenario", scenario, "--json", "--out", str(out), "--timeout", timeout, *args],
                        cwd=project)
    assert res.stdout, res.stderr
    return res


def kinds(trial: dict) -> list:
    return [f["kind"] for f in trial["findings"]]


def test_a_horizon_stops_every_rank_at_the_same_step_and_keeps_the_verdict(ddp_project, tmp_path):
    res = trial_of(ddp_project, "rank-epoch-skew", "train.py", "--nproc", "2", "--horizon", "3", "--",
                   "--ckpt", "per-rank", out=tmp_path / "r")

    trial = res.trial
    assert res.returncode == 0, trial["headline"]
    assert [(r["rank"], r["outcome"], r["recovered_step"], r["reproduced"], r["last_step"]) for r in trial["ranks"]] == [
        (0, "last-good", 4, True, 7), (1, "last-good", 4, True, 7)]
    assert trial["compared_steps"] == 3 and trial["findings"] == []
    assert [run["stopped"] for run in trial["runs"]] == [True, False, True]
    reference = RunLog.read(Path(trial["runs"][0]["events"])).ranks()
    assert [(rank, len(proc.steps), proc.stopped) for rank, proc in reference.items()] == [(0, 11, 11), (1, 11, 11)]
    assert processes_of(tmp_path / "r") == []


def test_per_rank_checkpoints_agreeing_on_the_newest_common_epoch_pass(ddp_project, tmp_path):
    res = trial_of(ddp_project, "rank-epoch-skew", "train.py", "--nproc", "2", "--", "--ckpt", "per-rank",
                   out=tmp_path / "r")

    trial = res.trial
    assert res.returncode == 0, trial["headline"]
    assert trial["fault"]["rank"] == 1 and trial["fault"]["path"] == "ckpt/rank1-epoch1.pt.tmp"
    assert trial["last_good_step"] == 4 and trial["findings"] == []
    assert [(r["rank"], r["outcome"], r["recovered_step"], r["reproduced"], r["last_step"]) for r in trial["ranks"]] == [
        (0, "last-good", 4, True, 16), (1, "last-good", 4, True, 16)]
    faulted = Path(trial["runs"][1]["events"])
    names = sorted(p.name.split(".")[1] for p in faulted.glob("events.*.jsonl"))
    assert names == ["0", "1"]
    hellos = [e for p in faulted.glob("events.*.jsonl") for e in read_event_file(p) if e["t"] == "hello"]
    assert sorted((h["rank"], h["local_rank"], h["world_size"]) for h in hellos) == [(0, 0, 2), (1, 1, 2)]
    by_rank = RunLog.read(faulted).ranks()
    # rank 0 had written all of checkpoint 2 when the job died; the checkpoint ends only at a next step, which
    # rank 0, waiting for rank 1 in the next collective, never reached
    assert by_rank[0].saves[0].ok and by_rank[0].saves[1].files and all(f["ok"] for f in by_rank[0].saves[1].files)
    assert [s.ok for s in by_rank[1].saves] == [True, None]  # rank 1 was inside it
    assert trial["runs"][1]["survivors"] == 0 and processes_of(tmp_path / "r") == []


def test_ranks_loading_their_own_newest_file_overlap_miss_rows_and_hang(ddp_project, tmp_path):
    res = trial_of(ddp_project, "rank-epoch-skew", "train.py", "--nproc", "2", "--", "--ckpt", "per-rank",
                   "--resume", "own", out=tmp_path / "r", timeout="20")

    trial = res.trial
    assert res.returncode == 1 and trial["status"] == "failed"
    assert trial["headline"].startswith(
        "FAILED rank-epoch-skew: the ranks resumed from different checkpoints: rank 0 from step 8, rank 1 from step 4")
    found = {f["kind"]: f for f in trial["findings"]}
    assert found["ranks-disagree"]["steps"] == {"0": 8, "1": 4}
    overlap = found["sampler-overlap"]
    assert overlap["pass"] == 1 and overlap["epochs"] == {"0": 2, "1": 1}
    assert overlap["overlaps"][0]["ranks"] == [0, 1] and overlap["reads_too_many"] > 0
    assert found["sampler-missing"]["count"] == overlap["reads_too_many"]
    hung = found["resume-hung"]  # rank 0 waits in its final barrier, rank 1 in its next step's all-reduce
    assert hung["ranks"]["0"]["last_step"] == 16 and hung["ranks"]["1"]["last_step"] == 12
    assert "rank 0 at step 16" in hung["message"] and "rank 1 at step 12" in hung["message"]
    resume = trial["runs"][2]
    assert resume["timed_out"] is True and resume["survivors"] == 0
    assert processes_of(tmp_path / "r") == []


def test_offset_variant_shifts_one_ranks_epoch_on_resume(ddp_project, tmp_path):
    res = trial_of(ddp_project, "rank-epoch-skew", "train.py", "--nproc", "2", "-p", "variant=offset", "-p", "offset=2",
                   "--", "--ckpt", "per-rank", out=tmp_path / "r")

    trial = res.trial
    assert res.returncode == 1
    assert [r["recovered_step"] for r in trial["ranks"]] == [4, 4] and "ranks-disagree" not in kinds(trial)
    overlap = next(f for f in trial["findings"] if f["kind"] == "sampler-overlap")
    assert overlap["epochs"] == {"0": 1, "1": 3}
    order = next(f for f in trial["findings"] if f["kind"] == "epoch-order-replayed")
    assert (order["rank"], order["epoch"], order["replayed_epoch"], order["expected_epoch"]) == (1, 3, 3, 1)


def test_rank0_checkpoint_without_the_epoch_replays_epoch_order_under_torchrun(ddp_project, tmp_path):
    res = trial_of(ddp_project, "rank-epoch-skew", "--", "torchrun", "--nproc_per_node", "2", "train.py", "--no-epoch",
                   out=tmp_path / "r")

    trial = res.trial
    assert res.returncode == 1, trial["headline"]
    assert trial["fault"]["rank"] == 0 and trial["recovered_step"] == trial["last_good_step"] == 4
    replays = [f for f in trial["findings"] if f["kind"] == "epoch-order-replayed"]
    assert [(f["rank"], f["step"], f["epoch"], f["replayed_epoch"], f["expected_epoch"]) for f in replays] == [
        (0, 4, 0, 0, 1), (1, 4, 0, 0, 1)]
    assert trial["first_divergent_step"] == 5 and "in the order of epoch 0" in trial["headline"]
    assert not {"sampler-overlap", "sampler-missing", "ranks-disagree", "rng-not-restored"} & set(kinds(trial))


def test_kill9_mid_save_of_a_two_rank_job_with_the_epoch_in_its_checkpoint_passes(ddp_project, tmp_path):
    res = trial_of(ddp_project, "kill9-mid-save", "train.py", "--nproc", "2", out=tmp_path / "r")

    trial = res.trial
    assert res.returncode == 0, trial["headline"]
    assert trial["outcome"] == "last-good" and trial["recovered_step"] == trial["last_good_step"] == 4
    assert [(r["rank"], r["recovered_step"], r["reproduced"], r["compared_steps"]) for r in trial["ranks"]] == [
        (0, 4, True, 12), (1, 4, True, 12)]
    assert trial["findings"] == []
    assert all(run["survivors"] == 0 for run in trial["runs"]) and processes_of(tmp_path / "r") == []


def test_a_sampler_whose_epoch_is_never_set_shows_in_the_reference(tmp_path):
    (tmp_path / "job.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n"
        "data = TensorDataset(torch.arange(64.0))\n"
        "loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=2, rank=0))\n"
        "for epoch in range(3):\n"
        "    for batch in loader:\n"
        "        pass\n"
    )
    spec = launcher.RunSpec("stuck", [sys.executable, "job.py"], tmp_path, tmp_path / "run", timeout_s=120)
    result = launcher.launch(spec)
    assert result.returncode == 0, result.stderr.read_text()
    (finding,) = coverage.epoch_never_set(RunLog.read(result.events_dir))
    assert finding.details == {"sampler": "DistributedSampler", "size": 64, "ranks": [0], "passes": 3, "epoch": 0}


def test_nproc_and_rank_skew_parameters_are_checked(ddp_project, tmp_path):
    (ddp_project / "train.sh").write_text("python train.py\n")
    res = run_chaosckpt(["run", "--nproc", "2", "-s", "rank-epoch-skew", "--", "bash", "train.sh"], cwd=ddp_project)
    assert res.returncode == 2 and res.stderr.strip().endswith("e.g. -- torchrun --nproc_per_node 2 train.py")
    res = run_chaosckpt(["run", "train.py", "--nproc", "2", "-s", "rank-epoch-skew", "-p", "variant=shift"], cwd=ddp_project)
    assert res.returncode == 2 and "trigger.variant must be one of kill, offset, reset" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
