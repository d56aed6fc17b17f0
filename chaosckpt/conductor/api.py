"""The Python API: ``chaosckpt.run(...)`` applies one scenario to a job and returns its typed ``Trial``.

    import chaosckpt
    result = chaosckpt.run("train.py", scenario="kill9-mid-save", args=["--epochs", "3"])
    assert result.passed, result.headline

Bad input raises ``chaosckpt.conductor.errors.UsageError`` with the one-line message the CLI prints.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from chaosckpt.conductor import faults, scenario as scenarios
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import Trial, document
from chaosckpt.conductor.runs import cache, horizon as horizons, invocation
from chaosckpt.conductor.trial import TrialOptions, run_trial

Command = Union[str, Sequence[str]]


def _argv(value: Command) -> List[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def _optional_argv(value: Optional[Command]) -> Optional[List[str]]:
    return None if value is None else _argv(value)


def run(
    job: Command,
    scenario: str = faults.DEFAULT_SCENARIO,
    *,
    args: Sequence[str] = (),
    params: Optional[Dict[str, Any]] = None,
    resume_args: Optional[Command] = None,
    resume_command: Optional[Command] = None,
    workdir: Union[str, Path] = ".",
    out: Union[str, Path, None] = None,
    timeout: float = 3600.0,
    tolerance: float = 0.0,
    keep_sandbox: bool = False,
    reuse_reference: bool = True,
    horizon: Union[int, str, None] = horizons.DEFAULT,
) -> Trial:
    """Run ``job`` (a script relative to ``workdir``, or a command) under ``scenario`` and return the verdict.

    ``params`` overrides scenario parameters (``{"save": 3, "fraction": 0.9}``). Results go to
    ``out`` (default ``workdir/chaosckpt-results``) as with ``chaosckpt run``; ``horizon`` is the number of
    steps compared after the resume point, or ``"end"``. With ``reuse_reference``
    the reference run comes from the project's cache when nothing it depends on changed.
    """
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise UsageError(f"workdir {workdir} is not a directory")
    if timeout <= 0:
        raise UsageError(f"timeout={timeout:g} is invalid: a run needs some time; give seconds > 0")
    if tolerance < 0:
        raise UsageError(f"tolerance={tolerance:g} is invalid: use 0 for bitwise or a positive relative tolerance")
    scen = scenarios.load(scenario, dict(params or {}))
    steps = horizons.parse(horizon, "horizon=")
    command = invocation.job_command([*_argv(job), *args], workdir, base=workdir)
    resume = invocation.resume_command(command, _optional_argv(resume_args), _optional_argv(resume_command))
    root = Path(out) if out is not None else workdir / "chaosckpt-results"
    results = invocation.results_dir(root, scen.name)
    reference = None
    if reuse_reference:
        parts = cache.key_parts(command, resume)
        reference = results / "cached-reference"
        stop = horizons.trial_stop(steps, scen.trigger)
        cache.reference_into(reference, cache.key(parts), parts, command, workdir, timeout, [root], stop=stop)
    opts = TrialOptions(command, resume, workdir, results, timeout, tolerance, keep_sandbox, reference=reference,
                        exclude=[root], horizon=steps)
    try:
        trial = run_trial(scen, opts)
    finally:
        if reference is not None:
            shutil.rmtree(reference, ignore_errors=True)
    atomic.write_text(results / "result.json", json.dumps(document([trial]), indent=2) + "\n")
    return trial
