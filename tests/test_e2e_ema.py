"""A resume that continues from other weights than the model's (tests/jobs/ema_job.py: its checkpoint holds the
model, an EMA copy, a half-precision copy and the model before its last update; ``--load`` picks the tensors the
resume loads into the model): the state no run recorded is traced to the tensor set it came from. What the job
really does was established by hand (tests/jobs/ema_job.truth.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "ema_job.py"


def test_a_resume_that_loads_the_ema_into_the_model_fails_naming_the_ema(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save")
    assert rc == 1 and t["status"] == "failed" and t["outcome"] == "last-good", t["headline"]
    assert (t["recovered_step"], t["reproduced"]) == (t["last_good_step"], False)
    taken = {f["kind"]: f for f in t["findings"]}["resumed-other-weights"]
    assert (taken["path"], taken["key"], taken["model_key"]) == ("ckpt/last.pt", "ema", "model")
    assert "under 'ema' in ckpt/last.pt, not the model's ('model')" in t["headline"]


def test_a_resume_that_loads_the_half_precision_copy_is_told_it_took_that_copy(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--load", "fp16")
    taken = {f["kind"]: f for f in t["findings"]}["resumed-other-weights"]
    assert rc == 1 and t["outcome"] == "last-good" and t["reproduced"] is False, t["headline"]
    assert (taken["key"], taken["dtype"]) == ("model_fp16", "float16")
    assert "the half-precision copy under 'model_fp16'" in taken["message"]


def test_a_resume_that_loads_the_model_s_own_weights_passes(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--load", "model")
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good" and t["reproduced"] is True, \
        t["headline"]
    assert not [f for f in t["findings"] if f["kind"].startswith("resumed-")]


def test_a_power_loss_that_the_fsynced_checkpoint_survived_is_no_lost_checkpoint_when_the_resume_took_the_ema(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "power-loss")
    kinds = [f["kind"] for f in t["findings"]]
    assert rc == 1 and t["outcome"] == "last-good" and t["last_good_step"] == 16, t["headline"]
    assert "resumed-other-weights" in kinds and "acknowledged-checkpoint-lost" not in kinds, kinds
