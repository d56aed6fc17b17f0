"""kill9 and ENOSPC land in a checkpoint's other writers end to end: a JSON state file written with open(), a
shutil.copyfile (sendfile), safetensors' native writer. tests/jobs/writers_job.py writes all of them in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "writers_job.py"


def trial(tmp_path, *args):
    return judged(tmp_path, JOB, *args)


def test_kill_at_half_the_checkpoint_lands_in_its_json_state_file(tmp_path):
    """model.pth, state.json, best.pth: half the checkpoint's bytes is inside state.json, which the resume reads
    torn."""
    rc, t = trial(tmp_path, "-s", "kill9-mid-save")
    assert t["fault"]["path"] == "ckpt/state.json" and t["fault"]["save"] == 2
    assert t["fault"]["files"]["ckpt/state.json"] > 0  # cut part-way
    assert rc == 1 and t["outcome"] == "crashed" and "JSONDecodeError" in t["error"]
    torn = {f["kind"]: f for f in t["findings"]}
    assert torn["torn-checkpoint"]["path"] == "ckpt/state.json"  # json.load names no file: the struck one is named
    assert torn["torn-checkpoint"]["bytes"] < torn["torn-checkpoint"]["full_bytes"] < 20000  # that file's size
    assert torn["in-place-save"]["overwritten_step"] == 2


def test_enospc_in_the_copy_of_a_safetensors_checkpoint_is_survived(tmp_path):
    """The last 0.5% of the checkpoint is its copy best.pth, only if the reference counted the bytes safetensors
    wrote natively; the resume never reads the copy, so the job passes."""
    rc, t = trial(tmp_path, "-s", "enospc", "-p", "fraction=0.995", "--", "--safetensors")
    assert t["fault"]["path"] == "ckpt/best.pth" and t["fault"]["kind"] == "enospc"
    assert rc == 0, t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 4 and t["reproduced"] is True
