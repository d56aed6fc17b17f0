"""pytest plugin (entry point ``pytest11``): the ``chaosckpt`` fixture, for resilience tests in a project's own suite.

    def test_survives_kill_mid_save(chaosckpt):
        result = chaosckpt.run("train.py", scenario="kill9-mid-save", args=["--epochs", "3"])
        assert result.passed, result.headline

The fixture's ``run`` is ``chaosckpt.run`` with results written under the test's ``tmp_path``.
Loaded by every pytest session of an environment with chaosckpt installed, so it imports
nothing of chaosckpt until a test uses the fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class ChaosRunner:
    """What the ``chaosckpt`` fixture gives a test: ``run(...)`` with results kept in the test's folder."""

    def __init__(self, results: Path) -> None:
        self.results = results

    def run(self, job: Any, scenario: str = "kill9-mid-save", **kwargs: Any):
        from chaosckpt.conductor.api import run

        kwargs.setdefault("out", self.results)
        return run(job, scenario, **kwargs)


@pytest.fixture
def chaosckpt(tmp_path: Path) -> ChaosRunner:
    """Runs a chaosckpt scenario against a training job; see ``chaosckpt.run`` for the arguments."""
    return ChaosRunner(tmp_path / "chaosckpt-results")
