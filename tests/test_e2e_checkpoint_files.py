"""Issue 19 items 4 and 5 end to end: a checkpoint folder that is the working directory (the script and a
data-preparation process's files beside last.pt), hard-linked per-epoch copies written with os.pwrite/os.writev
through a folder's descriptor, and safetensors' temporary file renamed into place (tests/jobs/*.truth.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "jobs"


def test_a_power_loss_in_the_working_directory_lists_the_checkpoint_alone_and_passes(tmp_path):
    """The data-preparation process never fsyncs data.bin: its files are not the checkpoint's and are left as it
    wrote them (before: rebuilt empty, the resume crashed on data.json, and fault.files listed train.py)."""
    rc, t = judged(tmp_path, JOBS / "cwd_ckpt_job.py", "-s", "power-loss")
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good", t["headline"]
    assert set(t["fault"]["files"]) == {"last.pt"}
    assert not [f for f in t["findings"] if f["kind"] == "not-interposed"]


def test_a_naive_save_in_the_working_directory_fails_naming_last_pt_alone(tmp_path):
    rc, t = judged(tmp_path, JOBS / "cwd_ckpt_job.py", "-s", "power-loss", "--", "--naive")
    assert rc == 1 and t["status"] == "failed" and t["outcome"] == "crashed", t["headline"]
    assert t["fault"]["files"] == {"last.pt": 0}
    assert "acknowledged-checkpoint-lost" in [f["kind"] for f in t["findings"]]


def test_the_sweep_of_a_save_in_the_working_directory_walks_the_save_alone(tmp_path):
    """The data-preparation process's 17 writes are no crash points, and no row lists the script or the data."""
    rc, t = judged(tmp_path, JOBS / "cwd_ckpt_job.py", "-s", "power-loss", "--sweep")
    assert rc == 0 and t["status"] == "passed", t["headline"]
    listed = {f["path"] for p in t["sweep"] for f in p["files"]}
    assert listed == {"last.pt", "last.pt.tmp"}
    # the save's operations from its torch.save into last.pt.tmp (opened just before it) on
    assert [p["operation"].split()[0] for p in t["sweep"]] == ["before", *["write"] * 5, "fsync", "rename", "dirsync"]


def test_hard_links_whose_names_were_made_durable_survive_a_strict_power_loss(tmp_path):
    """link_job resumes from the newest epoch-N.pt, a hard link of last.pt (written by os.writev and os.pwrite
    through the folder's descriptor); the folder is fsynced after the links (before: no link was journaled, no
    byte counted, the checkpoint folder never found, and the trial passed with nothing rebuilt)."""
    rc, t = judged(tmp_path, JOBS / "link_job.py", "-s", "power-loss", "-p", 'model="strict"')
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good", t["headline"]
    files = t["fault"]["files"]
    assert files["ckpt/epoch-1.pt"] == files["ckpt/last.pt"] == files["ckpt/best.pt"] > 0


def test_a_hard_link_whose_name_was_never_made_durable_is_lost_to_a_strict_power_loss(tmp_path):
    rc, t = judged(tmp_path, JOBS / "link_job.py", "-s", "power-loss", "-p", 'model="strict"', "--", "--naive")
    assert rc == 1 and t["status"] == "failed" and t["outcome"] == "older", t["headline"]
    assert "ckpt/epoch-1.pt" not in t["fault"]["files"] and "ckpt/epoch-0.pt" in t["fault"]["files"]
    lost = [f for f in t["findings"] if f["kind"] == "acknowledged-checkpoint-lost"]
    assert lost and any("epoch-1.pt" in f["message"] and "no fsync of ckpt/" in f["message"] for f in lost)


def test_a_kill_lands_inside_the_pwrites_of_a_file_opened_by_dir_fd(tmp_path):
    rc, t = judged(tmp_path, JOBS / "link_job.py", "-s", "kill9-mid-save")
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good", t["headline"]
    assert t["fault"]["path"] == "ckpt/last.pt.tmp"
    states = t["fault"]["file_states"]
    state = states["ckpt/last.pt.tmp"]
    assert 0 < state["bytes"] < state["full_bytes"] and state["loads"] is False
    for name in ("ckpt/last.pt", "ckpt/epoch-0.pt", "ckpt/best.pt"):  # the links, named with their source's bytes
        assert states[name] == {"bytes": state["full_bytes"], "full_bytes": state["full_bytes"], "loads": True}


def test_a_kill_in_a_safetensors_save_leaves_the_old_file_whole(tmp_path):
    """safetensors writes a temporary file and renames it over model.safetensors (before: chaosckpt wrote it in
    place, tore it and failed the job with torn-checkpoint and in-place-save)."""
    rc, t = judged(tmp_path, JOBS / "safetensors_job.py", "-s", "kill9-mid-save")
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good", t["headline"]
    state = t["fault"]["file_states"]["ckpt/model.safetensors"]
    assert state["bytes"] == state["full_bytes"] and state["loads"] is True


def test_a_power_loss_after_a_safetensors_save_loses_the_unsynced_rename(tmp_path):
    rc, t = judged(tmp_path, JOBS / "safetensors_job.py", "-s", "power-loss")
    assert rc == 1 and t["status"] == "failed" and t["outcome"] == "crashed", t["headline"]
    assert t["fault"]["files"] == {"ckpt/model.safetensors": 0}
    assert "acknowledged-checkpoint-lost" in [f["kind"] for f in t["findings"]]
