"""The sweep's load check: one judge (audit's safe reader) decides whether a file loads."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from chaosckpt.conductor.disk import loadcheck


def rng_checkpoint(path):
    """What examples/robust_train.py saves: numpy's and Python's RNG states, which weights_only=True refuses."""
    torch.save({"model": {"w": torch.ones(3)}, "epoch": 2,
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}},
               path)


def test_a_checkpoint_with_numpy_rng_state_loads_with_a_lesser_note(tmp_path):
    path = tmp_path / "last.pt"
    rng_checkpoint(path)
    result = loadcheck.check(str(path))
    assert result["ok"] is True and result["error"] == ""
    assert result["progress"] == {"epoch": 2}
    assert "weights_only=False" in result["note"] and "numpy" in result["note"]


def test_a_plain_state_dict_loads_without_a_note(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(3), "step": 4}, path)
    assert loadcheck.check(str(path)) == {"ok": True, "error": "", "note": "", "progress": {"step": 4}}


def test_a_torn_copy_of_the_same_checkpoint_is_unreadable(tmp_path):
    path = tmp_path / "last.pt"
    rng_checkpoint(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = loadcheck.check(str(path))
    assert result["ok"] is False and result["error"].startswith("torn")


def test_the_worker_answers_for_every_path(tmp_path):
    good, empty = tmp_path / "a.pt", tmp_path / "b.pt"
    rng_checkpoint(good)
    empty.write_bytes(b"")
    checker = loadcheck.LoadChecker()
    try:
        answer = checker.check([str(good), str(empty)])
    finally:
        checker.close()
    assert answer[str(good)]["ok"] is True and answer[str(empty)] == {
        "ok": False, "error": "empty file (0 bytes)", "note": "", "progress": {}}


def test_the_sweep_load_checks_every_kind_of_checkpoint_file_a_framework_writes(tmp_path):
    """Regression: only .pt/.pth/.ckpt/.bin were checked, so a sweep over model_best.pth.tar, safetensors and
    pickled RNG states found "no loadable file" in every state."""
    from safetensors.torch import save_file

    from chaosckpt.conductor.disk import crash, sweep

    src = tmp_path / "run" / "ckpt"
    src.mkdir(parents=True)
    rng_checkpoint(src / "model_best.pth.tar")
    save_file({"w": torch.ones(3)}, str(src / "model.safetensors"))
    torch.save({"python": random.getstate()}, src / "random_states_0.pkl")
    (src / "notes.txt").write_text("not a checkpoint")
    full = (src / "model_best.pth.tar").stat().st_size
    entries = [crash.Entry(str(src / "model_best.pth.tar"), str(src / "model_best.pth.tar"), full // 2)]
    entries += [crash.Entry(str(src / n), str(src / n), (src / n).stat().st_size)
                for n in ("model.safetensors", "random_states_0.pkl", "notes.txt")]
    files = [{"path": e.path, "bytes": e.length} for e in entries]
    whole = {e.path: e.length == Path(e.path).stat().st_size for e in entries}  # every file is the checkpoint's
    found = sweep.Sweep([sweep.CrashPoint(1, "write", 0, files)], [entries], [whole])
    checker = loadcheck.LoadChecker()
    try:
        sweep.check_states(found, [str(src)], tmp_path / "scratch", checker, None)
    finally:
        checker.close()
    assert [f.get("loads") for f in files] == [False, True, True, None]
