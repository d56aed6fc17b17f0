"""``chaosckpt init``: a project's first configuration, written from its training script: the ``[tool.chaosckpt]``
section (or ``chaosckpt.toml``), a pytest test that uses the plugin, and a GitHub Actions workflow. Nothing the user
already has is overwritten: a file or section that exists is a usage error naming it."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import List, Optional, Tuple

import click

from chaosckpt.conductor import faults
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.faults.kind import Needs
from chaosckpt.conductor.results import atomic

RESUME_FLAG = re.compile(r"""add_argument\(\s*["'](--[\w-]*resum[\w-]*)["']([^)]*)\)""", re.IGNORECASE)
"""An argparse flag whose name says it resumes (``--resume``, ``--resume-from``, ``--auto_resume``)."""
DISTRIBUTED = re.compile(r"init_process_group|torch\.distributed\.run|DistributedDataParallel|LOCAL_RANK")
WORKFLOW = Path(".github") / "workflows" / "chaosckpt.yml"
TEST = "test_chaosckpt_resilience.py"

EPILOG = """\b
Exit codes:
  0  the files were written
  2  usage error (no such script, or a file or section that already exists)
"""


def guess_resume(source: str) -> Tuple[List[str], str]:
    """The arguments that make the job resume, guessed from its argparse flags, and a comment saying how."""
    for flag, rest in RESUME_FLAG.findall(source):
        if "store_true" in rest:
            return [flag], f"its argparse flag {flag} (store_true)"
        return [], (f"its argparse flag {flag} takes a value chaosckpt cannot guess: set resume_args to it "
                    f"(resume_args = \"{flag} ckpt/last.pt\"); until then the resume runs the same command")
    return [], "no --resume-like flag found: the resume runs the same command (a job that resumes by itself)"


def fitting(distributed: bool) -> List[str]:
    """The built-in scenarios of the fault kinds a job on one machine meets (with more ranks: those that need them
    too, last), as the kinds name them."""
    one = [k.scenario for k in faults.KINDS.values() if k.needs == Needs()]
    ranked = [k.scenario for k in faults.KINDS.values() if k.needs.nodes == 1 and k.needs.ranks > 1]
    return one + (ranked if distributed else [])


def config_text(script: str, args: List[str], resume: List[str], why: str, scenarios: List[str],
                distributed: bool) -> str:
    """The TOML settings, commented: what each is and why it was chosen."""
    lines = [
        "# chaosckpt's settings for this job, written by chaosckpt init: chaosckpt suite runs them,",
        "# chaosckpt run -s SCENARIO takes them too. Every key is optional; see docs/suites-ci.md.",
        f"command = {_toml(shlex.join([script, *args]))}",
        f"# resume: {why}",
        f"resume_args = {_toml(shlex.join(resume))}" if resume else "# resume_args = \"--resume\"",
        *(["nproc = 2  # the job calls torch.distributed: two ranks through torch.distributed.run"] if distributed
          else []),
        "# the built-in scenarios that fit a job on one machine"
        + (" of several ranks" if distributed else "") + " (chaosckpt scenarios lists them all)",
        *([] if distributed else ["# and, swept (a crash after every file operation of save 2), the kill and the power "
                                  "loss: windows one cut point misses"]),
        "scenarios = [" + ", ".join([*(_toml(s) for s in scenarios),
                                     *([] if distributed else (f"{{ scenario = {_toml(s)}, sweep = true }}"
                                                               for s in faults.swept_by_default()))]) + "]",
        "horizon = 50      # steps compared after each resume",
        "timeout = 3600    # seconds a run may take",
    ]
    return "\n".join(lines) + "\n"


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_text(config: str, job: List[str], scenarios: List[str]) -> str:
    return f'''"""Resilience of the training job, checked by chaosckpt's pytest plugin (written by chaosckpt init).

Each test runs the job, injects the fault, resumes it and scores the recovery: a few runs of the job each. The
resume arguments and the other settings come from {config}."""

from pathlib import Path

import pytest

PROJECT = next(p for p in Path(__file__).resolve().parents if (p / {config!r}).is_file())
JOB = {job!r}


@pytest.mark.parametrize("scenario", {scenarios!r})
def test_the_job_survives(chaosckpt, scenario):
    result = chaosckpt.run(JOB, scenario=scenario, config=PROJECT / {config!r}, workdir=PROJECT)
    assert result.passed, result.headline
'''


WORKFLOW_TEXT = """# Runs chaosckpt's suite every night (written by chaosckpt init; see docs/suites-ci.md).
name: chaosckpt
on:
  schedule: [{cron: "0 2 * * *"}]
  workflow_dispatch:
jobs:
  resilience:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {python-version: "3.11"}
      - uses: actions/cache@v4                  # the cached reference run and the history
        with:
          path: .chaosckpt
          key: chaosckpt-${{ github.sha }}
          restore-keys: chaosckpt-
      - run: pip install chaosckpt -r requirements.txt
      - run: chaosckpt suite --junit junit.xml --markdown summary.md
      - if: always()
        run: cat summary.md >> "$GITHUB_STEP_SUMMARY"
      - if: always()
        uses: actions/upload-artifact@v4
        with: {name: chaosckpt-results, path: chaosckpt-results}
"""


def _free(path: Path) -> None:
    if path.exists():
        raise UsageError(f"{os.path.relpath(path)} already exists: chaosckpt init writes only new files; move it aside "
                         "or edit it")


@click.command("init", epilog=EPILOG)
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--no-test", is_flag=True, help="Write no pytest test.")
@click.option("--no-ci", is_flag=True, help="Write no GitHub Actions workflow.")
def command(script: Path, args: Tuple[str, ...], no_test: bool, no_ci: bool) -> None:
    """Write a first chaosckpt configuration for the job SCRIPT (its arguments after --): the settings in
    pyproject.toml's [tool.chaosckpt] (or chaosckpt.toml where there is no pyproject.toml), a pytest test using
    the plugin and a nightly GitHub Actions workflow. The resume arguments are guessed from the script's argparse
    flags and every guess is commented. Nothing that exists is overwritten.

    \b
    Examples:
      chaosckpt init train.py
      chaosckpt init train.py -- --epochs 3 --data data/
      chaosckpt init train.py --no-ci
    """
    if not script.is_file():
        raise UsageError(f"no script {script}: give the training script chaosckpt should run (chaosckpt init train.py)")
    root = Path.cwd()
    source = script.read_text(errors="replace")
    resume, why = guess_resume(source)
    distributed = bool(DISTRIBUTED.search(source))
    scenarios = fitting(distributed)
    settings = config_text(script.as_posix(), list(args), resume, why, scenarios, distributed)
    pyproject = root / "pyproject.toml"
    written: List[Path] = []
    test_path: Optional[Path] = None
    if not no_test:
        test_path = (root / "tests" if (root / "tests").is_dir() else root) / TEST
        _free(test_path)
    if not no_ci:
        _free(root / WORKFLOW)
    if pyproject.is_file():
        text = pyproject.read_text()
        if re.search(r"^\[tool\.chaosckpt(\.|\])", text, re.MULTILINE):
            raise UsageError(f"{pyproject} already has a [tool.chaosckpt] section; chaosckpt init adds one only where "
                             "there is none")
        atomic.write_text(pyproject, text.rstrip("\n") + "\n\n[tool.chaosckpt]\n" + settings)
        config = "pyproject.toml"
        written.append(pyproject)
    else:
        _free(root / "chaosckpt.toml")
        atomic.write_text(root / "chaosckpt.toml", settings)
        config = "chaosckpt.toml"
        written.append(root / "chaosckpt.toml")
    if test_path is not None:
        atomic.write_text(test_path, test_text(config, [script.as_posix(), *args], scenarios))
        written.append(test_path)
    if not no_ci:
        (root / WORKFLOW).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(root / WORKFLOW, WORKFLOW_TEXT)
        written.append(root / WORKFLOW)
    for path in written:
        click.echo(f"chaosckpt: wrote {path.relative_to(root)}")
    click.echo(f"chaosckpt: resume: {why}")
    click.echo("chaosckpt: next: chaosckpt suite --plan, then chaosckpt suite")
