"""Checked by mypy (not run): a user's code against chaosckpt's public API, as its type hints promise it.

The ``type: ignore[...]`` lines are misuses that mypy must reject: with --warn-unused-ignores, an
ignore that is not needed (because the API lost its types) fails the check.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import chaosckpt
from chaosckpt.conductor.errors import UsageError

trial: chaosckpt.Trial = chaosckpt.run("train.py", scenario="enospc", args=["--epochs", "2"], params={"save": 2},
                                       workdir=Path("."), timeout=60.0, tolerance=1e-6)
passed: bool = trial.passed
headline: str = trial.headline
lost: Optional[int] = trial.lost_steps
kinds: List[str] = [f.kind for f in trial.findings]
seconds: float = sum(r.duration_s for r in trial.runs)
version: str = chaosckpt.__version__

chaosckpt.run(["python", "train.py"], resume_args="--resume")
chaosckpt.run("train.py", timeout="60")  # type: ignore[arg-type]
chaosckpt.run("train.py", scenarios="enospc")  # type: ignore[call-arg]
wrong: int = trial.headline  # type: ignore[assignment]
error: Exception = UsageError("message")
