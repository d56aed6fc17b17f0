"""``chaosckpt audit`` on safetensors files and on checkpoint folders written by the real libraries
(safetensors, torch.save, Accelerate's save_state, torch.distributed.checkpoint), whole, torn and damaged."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import warnings
import zipfile

import pytest
import torch
from conftest import assert_envelope, run_chaosckpt

from chaosckpt.conductor.disk import audit, checkpoint_folder, loadcheck

safetensors_torch = pytest.importorskip("safetensors.torch")
np = pytest.importorskip("numpy")


class RunsCommand:
    """A pickle payload that runs ``func(*args)`` when unpickled."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def kinds(findings):
    return [f["kind"] for f in findings]


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return model, opt


def trainer_folder(path, step=4):
    """A ``checkpoint-N/`` as the Hugging Face Trainer writes it, with the same writers and in the same order."""
    model, opt = model_and_optimizer()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "tiny", "hidden_size": 16}))
    safetensors_torch.save_file(model.state_dict(), str(path / "model.safetensors"), metadata={"format": "pt"})
    torch.save(opt.state_dict(), path / "optimizer.pt")
    torch.save(sched.state_dict(), path / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
               path / "rng_state.pth")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 0.25, "max_steps": 12,
                                                         "save_steps": 4, "log_history": []}, indent=2))
    return path


def dcp_folder(path, step=7):
    """A torch.distributed.checkpoint folder from one process (``dcp.save`` without a process group)."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    model, opt = model_and_optimizer()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": torch.tensor(step), "epoch": 2,
             "rng": torch.get_rng_state(), "python_rng": random.getstate()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is ... uninitialized, assuming ... a single process"
        dcp.save(state, checkpoint_id=str(path))
    return path


def safetensors_verdict(path):
    """What the safetensors library itself says: None when it loads the file, else its error."""
    try:
        safetensors_torch.load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - any refusal is the verdict
        return str(exc)
    return None


def test_safetensors_header_is_read_without_the_library(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = {"w": torch.ones(3, 4), "b": torch.zeros(2, dtype=torch.bfloat16), "n": torch.arange(5)}
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    loaded = audit.load(path)
    assert loaded.format == "safetensors"
    assert {k: (v.dtype, tuple(v.shape), v.device.type) for k, v in loaded.obj.items() if k != "__metadata__"} == {
        k: (v.dtype, tuple(v.shape), "meta") for k, v in tensors.items()}
    assert loaded.obj["__metadata__"] == {"format": "pt"}
    report = audit.audit_file(path)
    assert report["findings"] == [] and report["file_format"] == "safetensors"
    assert {k["key"]: k["bytes"] for k in report["contents"]["keys"]} == {"w": 48, "b": 4, "n": 40, "__metadata__": 0}


def test_safetensors_verdict_agrees_with_the_library_on_torn_and_damaged_files(tmp_path):
    path = tmp_path / "model.safetensors"
    model, _ = model_and_optimizer()
    safetensors_torch.save_file(model.state_dict(), str(path))
    good = path.read_bytes()
    (length,) = struct.unpack("<Q", good[:8])
    header = good[8:8 + length]
    damaged = {
        "cut in the length": good[:5],
        "cut in the header": good[:8 + length // 2],
        "cut after the header": good[:8 + length],
        "cut in the data": good[:len(good) - 7],
        "trailing bytes": good + b"\0" * 16,
        "length past the end": struct.pack("<Q", len(good)) + good[8:],
        "length of 2**63": struct.pack("<Q", 1 << 63) + good[8:],
        "header not JSON": good[:8] + header.replace(b"{", b"[", 1) + good[8 + length:],
        "offsets shifted": good[:8] + header.replace(b'"data_offsets":[0,', b'"data_offsets":[4,', 1) + good[8 + length:],
        "dtype unknown": good[:8] + header.replace(b'"F32"', b'"F31"', 1) + good[8 + length:],
        "bit flip in the data": good[:-3] + bytes([good[-3] ^ 0x10]) + good[-2:],
    }
    for what, data in damaged.items():
        path.write_bytes(data)
        library = safetensors_verdict(path)
        report = audit.audit_file(path)
        if library is None:
            assert what == "bit flip in the data" and report["findings"] == [], what  # no checksum: nobody can tell
        else:
            assert kinds(report["findings"]) == ["unreadable-checkpoint"], (what, library)
        assert loadcheck.check(str(path))["ok"] is (library is None), what


def test_a_hostile_header_length_reads_nothing(tmp_path):
    """A length past the file, or over the library's 100 MB, is refused before any header byte is read."""
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 100_000_001) + b"{")
        f.truncate(100_000_001 + 64)  # sparse: the length fits in the file, so only the size limit refuses it
    [finding] = audit.audit_file(path)["findings"]
    assert "a 100000001-byte header, over the 100000000 bytes the safetensors library accepts" in finding["message"]
    path.write_bytes(struct.pack("<Q", (1 << 64) - 1) + b"{}")
    [finding] = audit.audit_file(path)["findings"]
    assert "the header length says 18446744073709551615 bytes, and only 2 follow it" in finding["message"]


def test_trainer_folder_is_judged_as_one_checkpoint(tmp_path):
    folder = trainer_folder(tmp_path / "checkpoint-4")
    report = checkpoint_folder.audit_folder(folder)
    assert (report["format"], report["complete"], report["step"], report["status"]) == (
        "Hugging Face Trainer checkpoint", True, 4, "ok")
    assert [f["path"] for f in report["files"]] == ["config.json", "model.safetensors", "optimizer.pt", "rng_state.pth",
                                                    "scheduler.pt", "trainer_state.json"]
    assert {(r["file"], r["kind"]) for r in report["rng_states"]} == {
        ("rng_state.pth", "Python random"), ("rng_state.pth", "numpy RandomState (MT19937)"),
        ("rng_state.pth", "torch CPU generator")}
    assert report["progress"] == [{"file": "trainer_state.json", "path": "global_step", "name": "global_step", "value": 4}]
    assert report["findings"] == []
    assert report["training_state"] == {"holds": [
        "model weights", "optimizer state", "LR scheduler state",
        "RNG states (Python random, numpy RandomState (MT19937), torch CPU generator)", "step or epoch counter"],
        "lacks": ["GradScaler state", "data position"]}
    alone = audit.audit_file(folder / "optimizer.pt")  # the optimizer file alone has no step: the folder has
    assert kinds(alone["findings"]) == ["no-step-in-checkpoint"]
    missing = checkpoint_folder.audit_folder(folder, streams=4)
    [rng] = missing["findings"]
    assert rng["kind"] == "rng-states-missing" and rng["message"].startswith("this checkpoint carries 3 RNG states")


def test_trainer_folder_torn_in_any_file_is_incomplete(tmp_path):
    folder = trainer_folder(tmp_path / "checkpoint-8", step=8)
    (folder / "trainer_state.json").unlink()  # killed before the Trainer's last file
    report = checkpoint_folder.audit_folder(folder)
    assert not report["complete"] and report["step"] is None
    [incomplete] = report["findings"]  # and no "save the step" advice: the Trainer does, in the missing file
    assert incomplete["kind"] == "incomplete-checkpoint" and incomplete["missing"] == ["trainer_state.json"]
    assert incomplete["message"].startswith("no trainer_state.json: the Trainer writes it last")
    assert report["notes"] == ["step and RNG states are not judged in an incomplete checkpoint: what is missing may "
                               "hold them"]

    folder = trainer_folder(tmp_path / "torn" / "checkpoint-8", step=8)
    data = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(data[:len(data) // 2])
    state = (folder / "trainer_state.json").read_text()
    (folder / "trainer_state.json").write_text(state[:20])
    model = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(model[:-1])
    report = checkpoint_folder.audit_folder(folder)
    assert not report["complete"]
    status = {f["path"]: f["status"] for f in report["files"]}
    assert status == {"config.json": "ok", "model.safetensors": "unreadable", "optimizer.pt": "unreadable",
                      "rng_state.pth": "ok", "scheduler.pt": "ok", "trainer_state.json": "unreadable"}
    errors = {f["path"]: f["findings"][0]["error"] for f in report["files"] if f["status"] == "unreadable"}
    assert errors["optimizer.pt"].startswith("torn: a zip archive without its end")
    assert errors["trainer_state.json"].startswith("not valid JSON (")
    assert errors["model.safetensors"].startswith("torn: tensor ")


def test_any_folder_of_checkpoint_files_and_an_empty_one(tmp_path):
    model, opt = model_and_optimizer()
    (tmp_path / "ckpt").mkdir()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "ckpt" / "last.pt")
    (tmp_path / "ckpt" / "meta").write_bytes(pickle.dumps({"epoch": 3}))  # no suffix: sniffed
    (tmp_path / "ckpt" / "README.txt").write_text("step 3\n")
    report = checkpoint_folder.audit_folder(tmp_path / "ckpt")
    assert (report["format"], report["complete"]) == ("checkpoint folder", True)
    assert [(f["path"], f["file_format"]) for f in report["files"]] == [("last.pt", "torch zip archive"),
                                                                        ("meta", "pickle")]
    assert report["progress"] == [{"file": "meta", "path": "epoch", "name": "epoch", "value": 3}]
    assert report["findings"] == [] and report["notes"] == ["README.txt: not a checkpoint format: not judged"]

    (tmp_path / "empty").mkdir()
    report = checkpoint_folder.audit_folder(tmp_path / "empty")
    assert not report["complete"] and kinds(report["findings"]) == ["incomplete-checkpoint"]
    assert report["findings"][0]["message"].endswith("holds no checkpoint file")


def test_accelerate_folder_written_by_save_state(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState

    accelerator = accelerate.Accelerator(cpu=True)
    try:
        model, opt = accelerator.prepare(*model_and_optimizer())
        accelerator.save_state(str(tmp_path / "checkpoint_0"))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    report = checkpoint_folder.audit_folder(tmp_path / "checkpoint_0")
    assert (report["format"], report["complete"], report["findings"]) == ("Accelerate checkpoint", True, [])
    assert {f["path"] for f in report["files"]} >= {"model.safetensors", "optimizer.bin", "random_states_0.pkl"}
    assert {r["kind"] for r in report["rng_states"] if r["file"] == "random_states_0.pkl"} >= {
        "Python random", "numpy RandomState (MT19937)", "torch CPU generator"}
    (tmp_path / "checkpoint_0" / "random_states_0.pkl").unlink()
    report = checkpoint_folder.audit_folder(tmp_path / "checkpoint_0")
    assert not report["complete"]
    assert kinds(report["findings"])[0] == "incomplete-checkpoint"
    assert report["findings"][0]["message"].startswith("no random_states_0.pkl: Accelerate's save_state writes it after")


def test_dcp_folder_state_from_metadata_and_shards(tmp_path):
    folder = dcp_folder(tmp_path / "step_7")
    report = checkpoint_folder.audit_folder(folder)
    assert (report["format"], report["complete"], report["step"], report["findings"]) == (
        "torch.distributed.checkpoint folder", True, 7, [])
    assert [(f["path"], f["file_format"], f["status"]) for f in report["files"]] == [
        (".metadata", "DCP metadata", "ok"), ("__0_0.distcp", "DCP shard", "ok")]
    assert {(p["path"], p["value"]) for p in report["progress"]} == {("step", 7), ("epoch", 2)}
    assert {(r["path"], r["kind"]) for r in report["rng_states"]} == {("rng", "torch CPU generator"),
                                                                      ("python_rng", "Python random")}


def test_dcp_folder_without_metadata_or_with_a_torn_or_damaged_shard(tmp_path):
    folder = dcp_folder(tmp_path / "step_7")
    shard = folder / "__0_0.distcp"
    data = shard.read_bytes()

    (folder / ".metadata").rename(tmp_path / "metadata")
    report = checkpoint_folder.audit_folder(folder)
    assert not report["complete"]
    [finding] = report["findings"]
    assert finding["kind"] == "incomplete-checkpoint"
    assert finding["message"].startswith("the folder holds 1 shard and no .metadata: dcp.save writes it last")
    (tmp_path / "metadata").rename(folder / ".metadata")

    shard.write_bytes(data[:-100])
    [torn] = [f for f in checkpoint_folder.audit_folder(folder)["files"] if f["path"] == "__0_0.distcp"]
    assert torn["status"] == "unreadable"
    assert torn["findings"][0]["error"].startswith(f"torn: {len(data) - 100} bytes, and .metadata places records up to")

    with zipfile.ZipFile(shard) as last:  # the shard's last record (the RNG state), found as zipfile finds any archive
        info = next(i for i in last.infolist() if i.filename.endswith("/data/0"))
    flipped = bytearray(data)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    flipped[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    shard.write_bytes(bytes(flipped))
    [damaged] = [f for f in checkpoint_folder.audit_folder(folder)["files"] if f["path"] == "__0_0.distcp"]
    assert damaged["status"] == "unreadable"
    assert re.fullmatch(r"item \S+ \(bytes \d+\.\.\d+ of the shard\): record archive/data/0 is damaged \(its bytes do "
                        r"not match the archive's CRC\)", damaged["findings"][0]["error"])

    shard.unlink()
    report = checkpoint_folder.audit_folder(folder)
    [missing] = report["findings"]
    assert missing["kind"] == "incomplete-checkpoint" and missing["missing"] == ["__0_0.distcp"]
    assert not report["complete"]


def test_no_flipped_byte_in_a_dcp_folder_gets_past_the_judge_or_raises(tmp_path):
    """Every byte of .metadata and a sample across the shard, flipped in turn: each is judged, none raises, and
    a folder called complete is one dcp.load itself reads back."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    folder = dcp_folder(tmp_path / "step_7")
    template = {"model": model_and_optimizer()[0].state_dict(), "step": torch.tensor(0)}
    for name, stride in ((".metadata", 97), ("__0_0.distcp", 499)):
        good = (folder / name).read_bytes()
        for at in range(0, len(good), stride):
            flipped = bytearray(good)
            flipped[at] ^= 0xFF
            (folder / name).write_bytes(bytes(flipped))
            report = checkpoint_folder.audit_folder(folder)
            if report["complete"]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    dcp.load(template, checkpoint_id=str(folder))
        (folder / name).write_bytes(good)


def test_dcp_metadata_that_points_outside_or_runs_code_is_refused(tmp_path):
    folder = dcp_folder(tmp_path / "step_7")
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # DCP's own classes: the test trusts its own file
    info = next(iter(metadata.storage_data.values()))
    info.relative_path = "../outside.distcp"
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    [meta] = checkpoint_folder.audit_folder(folder)["files"][:1]
    [finding] = meta["findings"]  # DCP's own classes in .metadata are no finding of their own
    assert meta["status"] == "unreadable"
    assert re.fullmatch(r"damaged: \.metadata places \S+ in \.\./outside\.distcp, which is not a file of the folder",
                        finding["error"])

    marker = tmp_path / "PWNED"
    (folder / ".metadata").write_bytes(pickle.dumps({"x": RunsCommand(os.system, f"touch {marker}")}))
    report = checkpoint_folder.audit_folder(folder)
    assert not marker.exists() and not report["complete"]
    assert kinds(report["files"][0]["findings"]) == ["unsafe-pickle", "unreadable-checkpoint"]


def test_cli_folders_text_and_json_valid_against_the_schema(tmp_path):
    trainer_folder(tmp_path / "out" / "checkpoint-4")
    torn = trainer_folder(tmp_path / "out" / "checkpoint-12", step=12)
    (torn / "trainer_state.json").unlink()
    dcp_folder(tmp_path / "step_7")

    clean = run_chaosckpt(["audit", "out/checkpoint-4", "step_7/"], cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    lines = clean.stdout.splitlines()
    assert lines[0].startswith("OK out/checkpoint-4/: Hugging Face Trainer checkpoint, complete, step 4, 6 files, ")
    assert "  step/epoch: trainer_state.json: global_step=4" in lines
    assert any(line.startswith("OK step_7/: torch.distributed.checkpoint folder, complete, step 7, 2 files") for line in lines)

    # a folder of checkpoint folders stands for each of them, in numeric order
    res = run_chaosckpt(["audit", "--json", "out", "out/checkpoint-4/optimizer.pt"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    doc = assert_envelope("audit", json.loads(res.stdout))
    assert [(c["path"], c["complete"], c["status"]) for c in doc["checkpoints"]] == [
        (os.path.join("out", "checkpoint-4"), True, "ok"), (os.path.join("out", "checkpoint-12"), False, "findings")]
    assert kinds(doc["checkpoints"][1]["findings"]) == ["incomplete-checkpoint"]
    assert [(f["path"], f["status"]) for f in doc["files"]] == [("out/checkpoint-4/optimizer.pt", "findings")]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare for an unreadable file as root")
def test_cli_hostile_folder_gets_one_line_notes_never_a_hang(tmp_path):
    folder = trainer_folder(tmp_path / "checkpoint-4")
    os.mkfifo(folder / "pipe.pt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock.pt"))
    os.symlink("loop.pt", folder / "loop.pt")
    os.symlink("nowhere.pt", folder / "dangling.pt")
    os.symlink(".", folder / "self")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    secret = folder / "scheduler.pt"
    secret.chmod(0)
    # root reads any file; in a user namespace without a mapping it is "nobody" and gets EACCES, as a user would
    command = ["unshare", "-U", sys.executable, "-m", "chaosckpt", "audit", "checkpoint-4"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    sock.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FINDINGS checkpoint-4/: Hugging Face Trainer checkpoint, incomplete, step 4, ")
    for line in ["  note: dangling.pt: a symbolic link that leads nowhere (No such file or directory): not read",
                 "  note: loop.pt: a symbolic link that leads nowhere (Too many levels of symbolic links): not read",
                 "  note: pipe.pt: a FIFO, not a file: not read",
                 "  note: self: a symbolic link to a folder: not followed",
                 "  note: sock.pt: a socket, not a file: not read",
                 "  - scheduler.pt: unreadable-checkpoint: cannot be loaded: cannot read it: Permission denied"]:
        assert line in lines, proc.stdout
    assert any(line.startswith("  - model.safetensors: unreadable-checkpoint: cannot be loaded: torn or damaged: the "
                               "header length says 4611686018427387904 bytes") for line in lines)


@pytest.mark.parametrize("make, message", [
    (lambda p: os.symlink("pipe.pt", p / "pipe.pt"), "chaosckpt: error: pipe.pt cannot be read (Too many levels"),
    (lambda p: os.symlink("gone.pt", p / "pipe.pt"), "chaosckpt: error: pipe.pt is a symbolic link to nothing"),
])
def test_cli_links_that_lead_nowhere_are_usage_errors(tmp_path, make, message):
    """(A FIFO given as a path: test_self_audit.)"""
    make(tmp_path)
    res = run_chaosckpt(["audit", "pipe.pt"], cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(message)


def _step_files(folder, torn_name):
    """Three whole step-named checkpoints and, under ``torn_name``, the first half of a fourth."""
    folder.mkdir()
    for step in (10, 20, 30):
        torch.save({"model": {"w": torch.ones(100)}, "step": step}, folder / f"step_{step:06d}.pt")
    data = (folder / "step_000030.pt").read_bytes()
    (folder / torn_name).write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize("name", ["step_000040.pt.tmp", "step_000040.pt.tmp.4242", "tmpq3x9_ab1", "last.pt.partial"])
def test_an_orphaned_temporary_file_beside_whole_checkpoints_is_a_note_not_a_torn_checkpoint(tmp_path, name):
    """What a kill leaves under temp-and-rename: the checkpoints stand, the temporary file is named in a note."""
    _step_files(tmp_path / "ckpt", name)
    res = run_chaosckpt(["audit", "ckpt", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    [folder] = assert_envelope("audit", json.loads(res.stdout))["checkpoints"]
    assert folder["complete"] and folder["status"] == "ok" and folder["step"] == 30
    assert {f["path"]: f["status"] for f in folder["files"]}[name] == "orphaned"
    assert [n for n in folder["notes"] if n.startswith(f"{name} is an orphaned temporary file")]
    text = run_chaosckpt(["audit", "ckpt"], cwd=tmp_path).stdout
    assert text.startswith("OK ckpt/: checkpoint folder, complete, step 30") and f"{name} " in text


@pytest.mark.parametrize("name, alone", [("step_000040.pt", False), ("step_000040.pt.tmp", True)])
def test_a_torn_checkpoint_or_a_temporary_file_with_nothing_whole_beside_it_still_fails(tmp_path, name, alone):
    _step_files(tmp_path / "ckpt", name)
    if alone:
        for step in (10, 20, 30):
            (tmp_path / "ckpt" / f"step_{step:06d}.pt").unlink()
    res = run_chaosckpt(["audit", "ckpt"], cwd=tmp_path)
    assert res.returncode == 1 and "incomplete" in res.stdout.splitlines()[0]
    assert f"{name}: unreadable-checkpoint" in res.stdout
