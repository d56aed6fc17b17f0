"""The GitHub Action (action.yml) run as a runner runs a composite action: each step's expressions filled in from
the inputs and the outputs of the steps before, its shell steps run with the GITHUB_* files a runner gives, its
`uses:` steps (the artifact upload) checked for what they would be given."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.e2e

EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def evaluate(expr: str, inputs, outputs) -> str:
    """The few expressions action.yml uses: inputs.X, steps.run.outputs.X with an `|| default`, always()."""
    value, _, default = (part.strip() for part in expr.partition("||"))
    if value.startswith("inputs."):
        found = inputs[value[len("inputs."):]]
    elif value.startswith("steps.run.outputs."):
        found = outputs.get(value[len("steps.run.outputs."):], "")
    else:
        raise AssertionError(f"an expression the test does not know: {expr}")
    return found or default.strip("'")


def condition(expr: str, inputs, outputs) -> bool:
    """A step's `if:`: always(), `inputs.X != ''`, and their `&&`."""
    ok = True
    for part in (p.strip() for p in expr.split("&&")):
        if part == "always()":
            continue
        name, _, literal = part.partition("!=")
        ok = ok and evaluate(name.strip(), inputs, outputs) != literal.strip().strip("'")
    return ok


def run_action(tmp_path: Path, project: Path, **given: str):
    """Every step of the action with ``given`` inputs (defaults for the rest): the outputs, the summary, the
    `uses:` steps' inputs and the status the job would end with."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(given)
    output, summary = tmp_path / "output", tmp_path / "summary"
    output.write_text("")
    summary.write_text("")
    env = {**os.environ, "GITHUB_ACTION_PATH": str(REPO), "GITHUB_OUTPUT": str(output),
           "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(project)}
    outputs, uploads, status = {}, [], 0
    for step in action["runs"]["steps"]:
        fill = lambda text: EXPRESSION.sub(lambda m: evaluate(m.group(1), inputs, outputs), str(text))  # noqa: E731
        if "if" in step and not condition(step["if"], inputs, outputs):
            continue
        if "uses" in step:
            uploads.append({k: fill(v) for k, v in step["with"].items()})
            continue
        cwd = project / fill(step.get("working-directory", "."))
        proc = subprocess.run([step["shell"], "-c", fill(step["run"])], cwd=cwd, capture_output=True, text=True,
                              env={**env, **{k: fill(v) for k, v in step.get("env", {}).items()}}, timeout=600)
        outputs.update(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        if proc.returncode:
            status = proc.returncode
            break
    return outputs, summary.read_text(), uploads, status


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "preempt_job.py", root / "train.py")
    return root


def test_a_failing_trial_fails_the_job_after_its_summary_and_its_results_are_handed_over(tmp_path, project):
    outputs, summary, uploads, status = run_action(tmp_path, project, install="", scenario="preemption",
                                                   job="train.py -- --handler exit")
    assert status == 1 and outputs["status"] == "1"
    folder = Path(project / outputs["results"])
    assert (folder / "result.json").is_file() and uploads == [{"name": "chaosckpt-results", "path": outputs["results"]}]
    assert "exit-0-after-preemption" in summary and "1 failed" in summary


def test_a_suite_that_passes_passes_and_fail_on_warning_fails_it_on_a_warning(tmp_path, project):
    (project / "chaosckpt.toml").write_text('command = "train.py --handler none"\nscenarios = ["preemption"]\n')
    outputs, summary, _, status = run_action(tmp_path, project, install="")
    assert (status, outputs["status"]) == (0, "0") and "1 passed" in summary
    outputs, _, _, status = run_action(tmp_path, project, install="", **{"fail-on": "warning"})
    assert (status, outputs["status"]) == (1, "1")  # no-emergency-save, a warning in a trial that passed


def test_a_usage_error_fails_the_job_with_status_2_and_says_so(tmp_path, project):
    outputs, summary, uploads, status = run_action(tmp_path, project, install="", scenario="no-such-scenario",
                                                   job="train.py")
    assert status == 2 and uploads == [] and "exited with status 2 before any result" in summary
