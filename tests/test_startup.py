"""The conductor starts without torch (about a second and a half of imports): a usage error, ``report``,
``history`` and the trial steps before a checkpoint is read pay nothing for it."""

from __future__ import annotations

import subprocess
import sys


def test_the_conductor_imports_torch_only_to_read_a_checkpoint():
    code = ("import sys\n"
            "from chaosckpt.conductor import cli\n"
            "from chaosckpt.conductor.commands import audit, clean, history, node, report, run, scenarios, suite\n"
            "from chaosckpt.conductor.suite import worker\n"
            "from chaosckpt.conductor.trial import runner\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
            "from chaosckpt.conductor.disk import checkpoint_folder\n"
            "print('torch' in sys.modules)\n")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert lines[:2] == ["[]", "True"]
