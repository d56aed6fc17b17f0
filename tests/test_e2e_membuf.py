"""A checkpoint serialized into memory, then written to its file (tests/jobs/membuf_job.py: torch.save into a
BytesIO, then Path.write_bytes over ckpt/last.pt): kill9 and ENOSPC land in that file write, not in the
serialization no file system sees, and are named there. What the job really does under them was established
by hand (tests/jobs/membuf_job.truth.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "membuf_job.py"


def trial(tmp_path, *args):
    return judged(tmp_path, JOB, *args)


@pytest.mark.parametrize("scenario,kind", [("kill9-mid-save", "halt"), ("enospc", "enospc")])
def test_a_fault_mid_save_lands_in_the_in_place_file_write_and_the_resume_crashes_on_the_torn_file(tmp_path, scenario,
                                                                                                   kind):
    rc, t = trial(tmp_path, "-s", scenario)
    fault = t["fault"]
    assert (fault["kind"], fault["save"], fault["path"]) == (kind, 2, "ckpt/last.pt")
    assert 0 < fault["bytes"] == fault["files"]["ckpt/last.pt"]  # half of the file's bytes, on disk
    assert rc == 1 and t["outcome"] == "crashed" and t["last_good_step"] == 8, t["headline"]
    found = {f["kind"]: f for f in t["findings"]}
    torn = found["torn-checkpoint"]
    assert torn["path"] == "ckpt/last.pt" and torn["bytes"] == fault["bytes"] == torn["full_bytes"] // 2
    assert found["in-place-save"]["path"] == "ckpt/last.pt"


def test_a_fault_in_the_named_file_strikes_the_file_the_memory_save_is_written_to(tmp_path):
    rc, t = trial(tmp_path, "-s", "kill9-mid-save", "-p", 'file="last.pt"', "-p", "fraction=0.1")
    assert t["status"] == "failed", t["headline"]
    torn = {f["kind"]: f for f in t["findings"]}["torn-checkpoint"]
    assert t["fault"]["path"] == "ckpt/last.pt" and t["fault"]["bytes"] == torn["full_bytes"] // 10


def test_a_full_disk_fails_the_file_write_and_that_checkpoint_is_not_the_last_good_one(tmp_path):
    rc, t = trial(tmp_path, "-s", "enospc", "-p", "free_bytes=0")
    assert rc == 1 and t["outcome"] == "crashed" and t["last_good_step"] == 8, t["headline"]


@pytest.mark.parametrize("scenario", ["kill9-mid-save", "enospc"])
def test_the_robust_variant_written_to_a_temporary_file_and_renamed_passes(tmp_path, scenario):
    rc, t = trial(tmp_path, "-s", scenario, "--", "--robust")
    assert t["fault"]["path"] == "ckpt/last.pt.tmp" and t["fault"]["bytes"] > 0
    assert rc == 0 and t["outcome"] == "last-good" and t["recovered_step"] == 8 and t["reproduced"] is True, \
        t["headline"]
