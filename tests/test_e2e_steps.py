"""Steps are booked when optimizer.step() returns: the loss of step N belongs to step N, closures included."""

from __future__ import annotations

import sys

import pytest

from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.runlog import RunLog

pytestmark = pytest.mark.e2e

CLOSURE_JOB = """
import torch
torch.manual_seed(0)
w = torch.nn.Parameter(torch.tensor([4.0]))
opt = torch.optim.SGD([w], lr=0.25)
for step in range(1, 4):
    def closure():
        opt.zero_grad()
        loss = (w * w).sum()  # 16, 4, 1: each step's loss is known before the step, so it can be checked
        loss.backward()
        return loss
    opt.step(closure)  # Lightning's automatic optimization: forward and backward run inside step()
"""


def test_a_closure_steps_loss_is_booked_to_its_own_step(tmp_path):
    (tmp_path / "job.py").write_text(CLOSURE_JOB)
    result = launcher.launch(launcher.RunSpec("closure", [sys.executable, "job.py"], tmp_path, tmp_path / "run", 120))
    assert result.returncode == 0, result.stderr.read_text()
    steps = RunLog.read(result.events_dir).trainer().steps
    assert [(s["step"], s["loss"]) for s in steps] == [(1, [16.0]), (2, [4.0]), (3, [1.0])]
