"""Resumed steps lined up with the uninterrupted run's by the batches they trained on, and judged from the state the
resume's load restored. A mid-epoch checkpoint that records only the epoch skips the rest of the epoch, or replays
its first steps, and is named so (tests/jobs/midepoch_job.py); a job that takes a zero-gradient step before its load
is not "restarted from scratch" (tests/jobs/preload_job.py). What the jobs really do was established by hand
(midepoch_job.truth.md, preload_job.truth.md)."""

from __future__ import annotations

import sys
import zlib
from array import array
from pathlib import Path

import pytest

from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.runlog import RunLog
from conftest import judged

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "jobs"


def by_kind(trial):
    return {f["kind"]: f for f in trial["findings"]}


def test_a_resume_that_starts_the_next_epoch_fails_naming_the_steps_it_skipped(tmp_path):
    rc, t = judged(tmp_path, JOBS / "midepoch_job.py", "-s", "kill9-mid-save")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 5, t["headline"]
    skipped = by_kind(t)["steps-skipped"]
    assert (skipped["first_step"], skipped["last_step"], skipped["batch_of_step"]) == (6, 12, 13)
    assert "the resume skipped steps 6-12" in t["headline"] and "5 steps into a DataLoader pass" in t["headline"]
    assert "rng-not-restored" not in by_kind(t)  # the loader's generator is reseeded by the job: not the cause


def test_a_resume_that_restarts_the_epoch_fails_naming_the_steps_it_replayed_and_only_them(tmp_path):
    """With dropout, torch's RNG state saved and restored: the replay is the one cause. The stream at the first
    resumed step is the checkpoint's (not the one the uninterrupted run had on the batch of step 1), and the
    loader's generator the checkpoint lacks is reseeded each epoch, so neither is named as a cause."""
    rc, t = judged(tmp_path, JOBS / "midepoch_job.py", "-s", "enospc", "--", "--resume", "epoch-start", "--dropout")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 5, t["headline"]
    replayed = by_kind(t)["steps-replayed"]
    assert (replayed["first_step"], replayed["last_step"]) == (1, 5)
    assert "trained again on the batches of steps 1-5" in t["headline"]
    assert "rng-not-restored" not in by_kind(t)
    missing = by_kind(t)["rng-states-missing"]
    assert missing["severity"] == "note" and "at the resume each stream was as in the uninterrupted run" in \
        missing["message"]


def test_a_resume_that_keeps_its_position_in_the_epoch_passes(tmp_path):
    rc, t = judged(tmp_path, JOBS / "midepoch_job.py", "-s", "kill9-mid-save", "--", "--resume", "position")
    assert rc == 0 and t["status"] == "passed" and t["recovered_step"] == 5 and t["compared_steps"] == 31, t["headline"]
    assert not {"steps-skipped", "steps-replayed"} & set(by_kind(t))


def test_a_step_taken_before_the_load_is_not_the_resume_s_first(tmp_path):
    rc, t = judged(tmp_path, JOBS / "preload_job.py", "-s", "kill9-mid-save")
    assert rc == 0 and t["status"] == "passed", t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 8 and t["compared_steps"] == 24
    assert "from scratch" not in t["headline"]
    note = by_kind(t)["steps-before-load"]
    assert note["severity"] == "note" and note["steps"] == 1


BATCH_JOB = """
import torch
from torch.utils.data import DataLoader, TensorDataset
w = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([w], lr=0.1)
w.grad = torch.zeros(1)
opt.step()  # a step no DataLoader batch fed
for (x,) in DataLoader(TensorDataset(torch.arange(6.0)), batch_size=2):
    loss = (w * x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_each_step_names_the_dataset_indices_of_the_batch_it_trained_on(tmp_path):
    (tmp_path / "job.py").write_text(BATCH_JOB)
    result = launcher.launch(launcher.RunSpec("batch", [sys.executable, "job.py"], tmp_path, tmp_path / "run", 120))
    assert result.returncode == 0, result.stderr.read_text()
    steps = RunLog.read(result.events_dir).trainer().steps
    expected = [f"{zlib.crc32(array('q', rows)):08x}" for rows in ([0, 1], [2, 3], [4, 5])]
    assert [s.get("batch") for s in steps] == [None, *expected]
