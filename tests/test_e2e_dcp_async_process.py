"""DCP's async_save in process mode end to end: the shards and .metadata are written by the checkpoint process
DCP spawns for each rank (dcp_async_job.truth.md), so the kill fires there, and the trial must still name the
step of the state the rank handed over and find the resume took the last good checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosckpt import protocol
from conftest import project_with, run_chaosckpt

pytest.importorskip("torch.distributed.fsdp")
pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "jobs"


def test_a_kill_in_the_checkpoint_process_is_in_the_save_of_the_step_handed_over(tmp_path):
    project = project_with(tmp_path, JOBS / "dcp_async_job.py")
    res = run_chaosckpt(["run", "train.py", "--nproc", "2", "-s", "kill9-mid-save", "--json", "--out",
                         str(tmp_path / "r"), "--", "--robust", "--process"], cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    t = res.trial
    assert (t["status"], t["outcome"], t["recovered_step"], t["last_good_step"]) == ("passed", "last-good", 4, 4)
    assert t["reproduced"] is True and t["findings"] == []
    assert t["fault"]["save"] == 2 and t["fault"]["step"] == 8 and "step_8/" in t["fault"]["path"]
    faulted = Path(t["results_dir"]) / "faulted" / "events"
    files = [protocol.read_event_file(p) for p in protocol.event_files(faulted)]
    (fired,) = [events for events in files if any(e["t"] == "fault" for e in events)]
    hello = fired[0]
    assert hello["t"] == "hello" and "helper_of" in hello
    ranks = {events[0]["pid"] for events in files if any(e["t"] == "step" for e in events)}
    assert hello["helper_of"] in ranks and hello["pid"] not in ranks
    assert not any(e["t"] == "step" for e in fired)
