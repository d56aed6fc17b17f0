"""``chaosckpt audit`` on real files: torn, malicious, bloated, legacy and plain ones, and its command line."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import zipfile

import pytest
import torch
from conftest import run_chaosckpt

from chaosckpt.conductor.disk import audit


def kinds(report):
    return [f["kind"] for f in report["findings"]]


def training_checkpoint():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 10,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}}


class RunsCommand:
    """A pickle payload that, when unpickled, runs ``func(*args)``: what a malicious checkpoint carries."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "PWNED"
    yield path
    assert not path.exists() or path.read_text() == "expected", "a malicious pickle ran"


def test_seed_view_file_is_flagged_and_its_clone_is_not(tmp_path):
    flat = torch.zeros(1_000_000)
    head = flat[:10]
    torch.save({"head": head}, tmp_path / "view.pt")
    torch.save({"head": head.clone()}, tmp_path / "clone.pt")
    assert os.path.getsize(tmp_path / "view.pt") > 1000 * os.path.getsize(tmp_path / "clone.pt")

    view = audit.audit_file(tmp_path / "view.pt")
    [bloat] = [f for f in view["findings"] if f["kind"] == "checkpoint-view-bloat"]
    assert bloat["path"] == "head"
    assert bloat["view_bytes"] == head.numel() * head.element_size()
    assert bloat["stored_bytes"] == flat.untyped_storage().nbytes()
    assert view["contents"]["keys"] == [{"key": "head", "bytes": flat.untyped_storage().nbytes(), "tensors": 1}]

    clone = audit.audit_file(tmp_path / "clone.pt")
    assert "checkpoint-view-bloat" not in kinds(clone)
    assert clone["contents"]["keys"] == [{"key": "head", "bytes": 40, "tensors": 1}]


def test_complete_checkpoint_reports_sizes_rng_and_step_without_findings(tmp_path):
    ckpt = training_checkpoint()
    torch.save(ckpt, tmp_path / "ckpt.pt")
    report = audit.audit_file(tmp_path / "ckpt.pt")
    assert report["findings"] == []
    assert report["file_format"] == "torch zip archive"
    contents = report["contents"]
    model_bytes = sum(t.untyped_storage().nbytes() for t in ckpt["model"].values())
    assert contents["keys"][0] == {"key": "model", "bytes": model_bytes, "tensors": 4}
    assert contents["rng_states"] == [{"path": "rng.torch", "kind": "torch CPU generator"},
                                      {"path": "rng.python", "kind": "Python random"}]
    assert contents["progress"] == [{"path": "step", "name": "step", "value": 10}]


def test_rng_states_of_every_kind_survive_the_file(tmp_path):
    np = pytest.importorskip("numpy")
    gen = torch.Generator().manual_seed(5)
    torch.save({"epoch": 2, "rng": {"cpu": torch.get_rng_state(), "cuda": [torch.zeros(16, dtype=torch.uint8)],
                                    "python": random.getstate(), "numpy": np.random.get_state(),
                                    "pcg": np.random.default_rng(0).bit_generator.state, "loader_gen": gen}},
               tmp_path / "rng.pt")
    report = audit.audit_file(tmp_path / "rng.pt", streams=7)
    found = {r["path"]: r["kind"] for r in report["contents"]["rng_states"]}
    assert found == {"rng.cpu": "torch CPU generator", "rng.cuda[0]": "CUDA generator", "rng.python": "Python random",
                     "rng.numpy": "numpy RandomState (MT19937)", "rng.pcg": "numpy bit generator (PCG64)",
                     "rng.loader_gen.state": "torch CPU generator"}
    [missing] = report["findings"]
    assert missing["kind"] == "rng-states-missing"
    assert missing["message"].startswith("this checkpoint carries 6 RNG states; the loop draws from 7 streams")


def test_numpy_scalars_become_plain_numbers(tmp_path):
    np = pytest.importorskip("numpy")
    torch.save({"iter_num": np.int64(250), "best_val_loss": np.float64(1.25)}, tmp_path / "np.pt")
    loaded = audit.load(tmp_path / "np.pt")
    assert loaded.obj == {"iter_num": 250, "best_val_loss": 1.25}
    assert audit.audit_file(tmp_path / "np.pt")["findings"] == []


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.01, 0.25, 0.5, 0.9, 0.999])
def test_torn_file_is_unreadable_at_every_cut(tmp_path, fraction):
    path = tmp_path / "last.pt"
    torch.save(training_checkpoint(), path)
    data = path.read_bytes()
    cut = int(len(data) * fraction) if fraction else 10
    path.write_bytes(data[:cut])
    with pytest.raises(Exception):
        torch.load(path, weights_only=True)
    report = audit.audit_file(path)
    assert report["contents"] is None and report["bytes"] == cut
    [finding] = report["findings"]
    assert finding["kind"] == "unreadable-checkpoint"
    assert "torn" in finding["error"]


def test_every_cut_of_a_small_checkpoint_is_unreadable(tmp_path):
    path = tmp_path / "small.pt"
    torch.save({"w": torch.ones(3), "step": 1}, path)
    data = path.read_bytes()
    for cut in range(0, len(data), 7):
        path.write_bytes(data[:cut])
        assert kinds(audit.audit_file(path)) == ["unreadable-checkpoint"], cut


def test_damaged_data_record_fails_its_crc(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save(training_checkpoint(), path)
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    [finding] = audit.audit_file(path)["findings"]
    assert finding["kind"] == "unreadable-checkpoint"
    assert f"record {info.filename} is damaged" in finding["message"]


def test_malicious_checkpoint_is_reported_and_not_run(tmp_path, marker):
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.ones(2)}, "step": 1, "x": RunsCommand(os.system, f"touch {marker}")}, path)
    report = audit.audit_file(path)
    assert not marker.exists()
    [unsafe] = report["findings"]
    assert unsafe["kind"] == "unsafe-pickle"
    assert unsafe["callables"] == [f"{os.system.__module__}.system"]
    (call,) = unsafe["calls"]  # long arguments are shortened in the report
    assert call.startswith(f"{os.system.__module__}.system('touch {str(marker)[:40]}")
    assert report["contents"]["keys"][0] == {"key": "model", "bytes": 8, "tensors": 1}

    torch.load(path, weights_only=False)
    assert marker.exists(), "the payload is real: an unguarded load runs it"
    marker.write_text("expected")


@pytest.mark.parametrize("payload, name", [
    (lambda m: RunsCommand(subprocess.check_call, ["touch", str(m)]), "subprocess.check_call"),
    (lambda m: RunsCommand(eval, f"open({str(m)!r}, 'w')"), "builtins.eval"),
])
def test_malicious_plain_pickles_are_reported_and_not_run(tmp_path, marker, payload, name):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"step": 3, "x": payload(marker)}, protocol=2))
    report = audit.audit_file(path)
    assert not marker.exists()
    assert report["file_format"] == "pickle"
    [unsafe] = report["findings"]
    assert (unsafe["kind"], unsafe["callables"]) == ("unsafe-pickle", [name])


def test_pickled_objects_are_named_and_their_tensors_still_counted(tmp_path):
    model = torch.nn.Linear(4, 2)
    torch.save({"args": argparse.Namespace(lr=0.1), "net": model, "step": 1}, tmp_path / "objs.pt")
    report = audit.audit_file(tmp_path / "objs.pt")
    [objects] = report["findings"]
    assert objects["kind"] == "pickled-objects"
    assert objects["names"][:2] == ["argparse.Namespace", "torch.nn.modules.linear.Linear"]
    net = next(k for k in report["contents"]["keys"] if k["key"] == "net")
    assert net == {"key": "net", "bytes": (4 * 2 + 2) * 4, "tensors": 2}


def test_legacy_format_is_read_and_its_tears_found(tmp_path):
    path = tmp_path / "legacy.pt"
    flat = torch.zeros(1_000_000)
    torch.save({"head": flat[:10], "epoch": 4, "rng": torch.get_rng_state()}, path, _use_new_zipfile_serialization=False)
    report = audit.audit_file(path)
    assert report["file_format"] == "legacy torch file"
    assert kinds(report) == ["checkpoint-view-bloat"]
    assert report["findings"][0]["stored_bytes"] == 4_000_000
    assert report["contents"]["rng_states"] == [{"path": "rng", "kind": "torch CPU generator"}]
    assert report["contents"]["progress"] == [{"path": "epoch", "name": "epoch", "value": 4}]
    data = path.read_bytes()
    for cut in (50, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        assert kinds(audit.audit_file(path)) == ["unreadable-checkpoint"], cut


def test_plain_pickle_of_tensors(tmp_path):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"w": torch.ones(3, 3), "global_step": 9}))
    report = audit.audit_file(path)
    assert report["findings"] == []
    assert report["contents"]["keys"][0] == {"key": "w", "bytes": 36, "tensors": 1}


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"step,loss\n1,0.5\n", "neither a torch checkpoint, a pickle nor a safetensors file"),
    (b"PK\x03\x04" + b"\0" * 100, "torn"),
])
def test_files_that_are_not_checkpoints(tmp_path, content, message):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    [finding] = audit.audit_file(path)["findings"]
    assert finding["kind"] == "unreadable-checkpoint" and message in finding["message"]


def test_cli_exit_codes_and_output(tmp_path, marker):
    torch.save(training_checkpoint(), tmp_path / "good.pt")
    torch.save({"head": torch.zeros(1_000_000)[:10], "step": 1}, tmp_path / "view.pt")
    torch.save({"x": RunsCommand(os.system, f"touch {marker}")}, tmp_path / "evil.pt")

    clean = run_chaosckpt(["audit", "good.pt"], cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.splitlines()[0].startswith("OK good.pt: 4 keys, ")
    assert "  step/epoch: step=10" in clean.stdout.splitlines()

    bad = run_chaosckpt(["audit", "good.pt", "view.pt", "evil.pt"], cwd=tmp_path)
    assert bad.returncode == 1, bad.stderr
    lines = bad.stdout.splitlines()
    assert lines[0].startswith("OK good.pt")
    assert any(line.startswith("FINDINGS view.pt: 2 keys") for line in lines)
    assert any(line.startswith("  - checkpoint-view-bloat: head (float32[10]) needs 40 B") for line in lines)
    assert any(line.startswith("  - unsafe-pickle: loading this file runs posix.system(") for line in lines)
    assert not marker.exists()


def test_cli_json_is_one_document(tmp_path):
    torch.save({"head": torch.zeros(1_000_000)[:10], "step": 1}, tmp_path / "view.pt")
    (tmp_path / "torn.pt").write_bytes((tmp_path / "view.pt").read_bytes()[:5000])
    res = run_chaosckpt(["audit", "--json", "view.pt", "torn.pt"], cwd=tmp_path)
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert doc["format"] == 1
    assert [(f["path"], f["status"]) for f in doc["files"]] == [("view.pt", "findings"), ("torn.pt", "findings")]
    assert [f["kind"] for f in doc["files"][0]["findings"]] == ["checkpoint-view-bloat"]
    assert doc["files"][1]["contents"] is None and doc["files"][1]["bytes"] == 5000


def test_cli_ignore_turns_advice_off(tmp_path):
    ckpt = training_checkpoint()
    del ckpt["step"]
    torch.save(ckpt, tmp_path / "nostep.pt")
    assert run_chaosckpt(["audit", "nostep.pt"], cwd=tmp_path).returncode == 1
    res = run_chaosckpt(["audit", "nostep.pt", "--ignore", "no-step-in-checkpoint"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_file_of_weights_alone_needs_no_step_counter(tmp_path):
    """Regression: a state dict, an exported model_best.pth or {"head": tensor} got no-step-in-checkpoint and exit 1."""
    model = training_checkpoint()["model"]
    torch.save(model, tmp_path / "model_best.pth")
    torch.save({"head": torch.ones(4)}, tmp_path / "head.pt")
    torch.save({"model": model, "optimizer": training_checkpoint()["optimizer"]}, tmp_path / "train.pt")
    assert kinds(audit.audit_file(tmp_path / "model_best.pth")) == []
    assert kinds(audit.audit_file(tmp_path / "head.pt")) == []
    assert kinds(audit.audit_file(tmp_path / "train.pt")) == ["no-step-in-checkpoint"]
    assert audit.audit_file(tmp_path / "train.pt")["contents"]["optimizer_states"] == ["optimizer"]
    res = run_chaosckpt(["audit", "model_best.pth", "head.pt"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    told = run_chaosckpt(["audit", "--training", "head.pt"], cwd=tmp_path)
    assert told.returncode == 1 and "  - no-step-in-checkpoint: " in told.stdout


@pytest.mark.parametrize("args, message", [
    (["audit", "missing.pt"], "chaosckpt: error: missing.pt does not exist"),
    (["audit", "ok.pt", "--ignore", "everything"], "chaosckpt: error: --ignore everything: unknown finding kind"),
    (["audit", "ok.pt", "--streams", "0"], "chaosckpt: error: --streams 0 is invalid"),
    (["audit"], "chaosckpt: error: Missing argument"),
])
def test_cli_usage_errors_are_one_line_exit_2(tmp_path, args, message):
    torch.save({"step": 1}, tmp_path / "ok.pt")
    res = run_chaosckpt(args, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stdout == "" and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(message)


def test_help_has_examples_and_exit_codes(tmp_path):
    res = run_chaosckpt(["audit", "--help"], cwd=tmp_path)
    assert res.returncode == 0
    assert "chaosckpt audit ckpt/last.pt" in res.stdout
    assert "1  some file or folder has findings" in res.stdout and "2  usage error" in res.stdout


def test_the_command_module_leaves_torch_unimported_until_it_runs():
    code = "import sys, chaosckpt.conductor.commands.audit; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_flipped_byte_that_torch_refuses_passes_the_audit(tmp_path):
    """Regression: flips in the records torch reads before the pickle (version, byteorder...), in the central
    directory (lengths, folder bits, disk numbers) and in the zip64 end records passed, while torch refused them."""
    path = tmp_path / "small.pt"
    torch.save({"w": torch.ones(3), "step": torch.tensor(2)}, path)
    good = path.read_bytes()
    passed_but_refused = []
    for at in range(len(good)):
        flipped = bytearray(good)
        flipped[at] ^= 0xFF
        path.write_bytes(bytes(flipped))
        if kinds(audit.audit_file(path)) != ["unreadable-checkpoint"]:
            try:
                torch.load(path, weights_only=True)
            except Exception:  # noqa: BLE001 - any refusal
                passed_but_refused.append(at)
    assert passed_but_refused == []


def test_a_training_checkpoint_lists_the_parts_of_a_training_state_it_holds_and_lacks(tmp_path):
    """As coverage lists missed lines: the parts are found by what the saved objects are, whatever the keys."""
    ckpt = training_checkpoint()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt["extra"] = {"when": torch.optim.lr_scheduler.StepLR(opt, 3).state_dict(),
                     "amp": torch.amp.GradScaler("cpu").state_dict()}
    torch.save(ckpt, tmp_path / "whole.pt")
    torch.save({"net": model.state_dict(), "o": opt.state_dict(), "epoch": 2}, tmp_path / "bare.pt")
    held = audit.audit_file(tmp_path / "whole.pt")["contents"]["training_state"]
    assert held == {"holds": ["model weights", "optimizer state", "LR scheduler state", "GradScaler state",
                              "RNG states (Python random, torch CPU generator)", "step or epoch counter"],
                    "lacks": ["data position"]}
    res = run_chaosckpt(["audit", "bare.pt"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "  training state held: model weights, optimizer state, step or epoch counter" in res.stdout.splitlines()
    assert "  training state lacked: LR scheduler state, GradScaler state, RNG states, data position (each costs " \
           "a resume only where the job has it; chaosckpt run shows which did)" in res.stdout.splitlines()
    torch.save(model.state_dict(), tmp_path / "weights.pt")  # an export: listed only when --training says so
    assert "training_state" not in audit.audit_file(tmp_path / "weights.pt")["contents"]
    told = run_chaosckpt(["audit", "--training", "weights.pt"], cwd=tmp_path)
    assert "  training state held: model weights" in told.stdout.splitlines()
