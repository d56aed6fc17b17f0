"""The Python API: ``chaosckpt.run(...)`` applies one scenario to a job and returns its typed ``Trial``.

    import chaosckpt
    result = chaosckpt.run("train.py", scenario="kill9-mid-save", args=["--epochs", "3"])
    assert result.passed, result.headline

Bad input raises ``chaosckpt.conductor.errors.UsageError`` with the one-line message the CLI prints.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypedDict, Union

from chaosckpt.conductor import config as configs, faults, option_table, scenario as scenarios
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import Trial, document
from chaosckpt.conductor.runs import invocation
from chaosckpt.conductor.trial import run_trial
from chaosckpt.conductor.trial.options import from_spec

if TYPE_CHECKING:
    from typing_extensions import Unpack

Command = Union[str, Sequence[str]]
PathLike = Union[str, Path]


class RunKeywords(TypedDict, total=False):
    """The types of ``run``'s option keywords, for a user's type checker; their names, help and checks come from
    ``option_table.OPTIONS`` (a test keeps the two the same)."""

    args: Sequence[str]
    resume_args: Command
    resume_command: Command
    nproc: int
    force: bool
    workdir: PathLike
    out: PathLike
    timeout: float
    tolerance: float
    horizon: Union[int, str, None]
    maps: Sequence[PathLike]
    exclude: Sequence[PathLike]
    ckpt_dirs: Sequence[str]
    keep_sandbox: bool
    max_resumes: int
    ignore: Sequence[str]
    sweep: bool
    nnodes: int
    hosts: str
    node_cmd: str
    listen: str


def _argv(value: Command) -> List[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def run(job: Command, scenario: str = faults.DEFAULT_SCENARIO, *, params: Optional[Dict[str, Any]] = None,
        config: Union[str, Path, None] = None, reuse_reference: bool = True, **keywords: Unpack[RunKeywords]) -> Trial:
    """Run ``job`` (a script relative to ``workdir``, or a command) under ``scenario`` and return the verdict.

    ``params`` overrides scenario parameters (``{"save": 3, "fraction": 0.9}``); ``config`` names a
    ``chaosckpt.toml`` or ``pyproject.toml`` whose settings the keywords override. Results go to
    ``out`` (default ``workdir/chaosckpt-results``) as with ``chaosckpt run``. With ``reuse_reference``
    the reference run comes from the project's cache when nothing it depends on changed. The other keywords
    are the options of ``chaosckpt run`` (listed below).
    """
    scen, spec = prepare(job, scenario, params=params, config=config, **keywords)
    results = invocation.results_dir(Path(spec["exclude"][0]), scen.name)
    trial = run_trial(scen, from_spec({**spec, "results_dir": str(results), "cache_reference": reuse_reference}))
    atomic.write_text(results / "result.json", json.dumps(document([trial]), indent=2) + "\n")
    return trial


def prepare(job: Command, scenario: str = faults.DEFAULT_SCENARIO, *, params: Optional[Dict[str, Any]] = None,
            config: Union[str, Path, None] = None, **keywords: Unpack[RunKeywords]) -> Tuple[scenarios.Scenario, Dict[str, Any]]:
    """The scenario and the trial's options (as ``option_table.trial_spec``) that ``run``'s arguments ask for."""
    values = option_table.from_api(keywords)
    values["command"] = (*_argv(job), *(values.get("command") or ()))
    workdir = (values.get("workdir") or Path(".")).resolve()
    if not workdir.is_dir():
        raise UsageError(f"workdir {workdir} is not a directory")
    values["workdir"] = workdir
    base = configs.load_file(Path(config)) if config is not None else configs.SuiteConfig(
        workdir=workdir, results=workdir / "chaosckpt-results")
    conf = base.merged(**values)
    scen = scenarios.load(scenario, dict(params or {}))
    sweep = bool(keywords.get("sweep"))
    faults.check_sweep(scen, sweep)
    return scen, option_table.trial_spec(conf, workdir, workdir, sweep=sweep)


run.__doc__ = (run.__doc__ or "") + "\n" + "\n".join(
    f"    ``{o.keyword}``: {o.help}" for o in option_table.OPTIONS if o.keyword not in ("args",)) + "\n"
