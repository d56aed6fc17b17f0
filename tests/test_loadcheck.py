"""The sweep's load check: one judge (audit's safe reader) decides whether a file loads."""

from __future__ import annotations

import random

import numpy as np
import torch

from chaosckpt.conductor import loadcheck


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
