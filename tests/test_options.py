"""Every option of a trial reaches it by each way in: a flag of ``chaosckpt run``, a keyword of ``chaosckpt.run``,
a key of the configuration file, and a suite worker's spec; no job runs, each entry's own parsing builds the
``TrialOptions`` and they are compared field by field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from chaosckpt.conductor import api, config, option_table
from chaosckpt.conductor.commands import run as run_command, suite as suite_command
from chaosckpt.conductor.results.suite_plan import PlannedTrial
from chaosckpt.conductor.suite.plan_run import Suite
from chaosckpt.conductor.suite.worker import from_spec as worker_from_spec
from chaosckpt.conductor.trial.options import TrialOptions, from_spec

SCHEMA_FILE = Path(config.__file__).parent / "results" / "schemas" / "config.schema.json"


def _values(tmp_path: Path) -> dict:
    """A value other than the default for every option a file can hold, as a configuration file spells it."""
    (tmp_path / "work" / "ckpt").mkdir(parents=True)
    (tmp_path / "work" / "old").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    (tmp_path / "scratch").mkdir()
    return {
        "command": ["train.py", "--epochs", "2"], "resume_args": ["--resume"], "nproc": 2, "workdir": ".",
        "results": "out", "timeout": 77.0, "tolerance": 0.25, "horizon": 7, "map": [str(tmp_path / "scratch")],
        "exclude": ["old"], "ckpt_dirs": ["ckpt"], "keep_sandbox": True, "max_resumes": 5,
        "ignore": ["rng-states-missing", "torn-checkpoint"], "force": True,
    }


def _cli(values: dict) -> list:
    argv = []
    for name, value in values.items():
        option = option_table.BY_NAME[name]
        if name == "command":
            continue
        if value is True:
            argv.append(option.flag)
        elif isinstance(value, list) and option.schema is not option_table.ARGV:
            for v in value:
                argv += [option.flag, str(v)]
        else:
            argv += [option.flag, " ".join(value) if isinstance(value, list) else str(value)]
    return argv


def _comparable(opts: TrialOptions) -> dict:
    """The fields that must agree whichever way in: all but where each invocation's results go."""
    return {f.name: getattr(opts, f.name) for f in fields(TrialOptions) if f.name not in ("results_dir", "progress")}


def _by_cli(tmp_path, values, argv_more=()):
    ctx = run_command.command.make_context("run", ["-s", "power-loss", *_cli(values), *argv_more, "--", *values["command"]])
    p = ctx.params
    given = {k: v for k, v in p.items() if k in option_table.BY_NAME}
    return run_command.prepare(p["args"], p["scenario_name"], p["params"], p["config_path"], True, given)[1]


def test_every_option_reaches_the_trial_by_each_way_in(tmp_path, monkeypatch):
    values = _values(tmp_path)
    work = tmp_path / "work"
    monkeypatch.chdir(work)
    assert set(values) | {"resume_command", "sweep"} | set(option_table.MULTI_NODE) == set(option_table.BY_NAME)

    by_cli = _by_cli(tmp_path, values)

    keywords = {option_table.BY_NAME[k].keyword: v for k, v in values.items() if k != "command"}
    scen, spec = api.prepare(values["command"][0], "power-loss", args=values["command"][1:], **keywords)
    assert scen.name == "power-loss"
    by_api = from_spec({**spec, "results_dir": str(tmp_path / "r")})

    (work / "chaosckpt.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    by_config = _by_cli(tmp_path, {"command": []})

    conf = config.load(None, work)
    plan, _ = suite_command._new_plan(conf, False, {})
    suite = Suite(tmp_path / "suite", plan, keep_sandbox=conf.keep_sandbox)
    by_worker = worker_from_spec(suite._spec(PlannedTrial("t", "power-loss"), tmp_path / "t"))

    expected = _comparable(by_cli)
    assert expected["timeout_s"] == 77.0 and expected["horizon"] == 7 and expected["max_resumes"] == 5
    assert expected["keep_sandbox"] and expected["ckpt_dirs"] == ["ckpt"] and "--resume" in expected["resume_command"]
    assert "torch.distributed.run" in expected["command"] and str(tmp_path / "scratch") in map(str, expected["maps"])
    assert Path(tmp_path / "work" / "old") in expected["exclude"]
    for name, opts in (("API", by_api), ("config", by_config), ("worker", {**_comparable(by_worker), "reference": None})):
        got = opts if isinstance(opts, dict) else _comparable(opts)
        assert got == expected, name


def test_the_options_only_run_takes_reach_the_trial_and_survive_the_spec(tmp_path, monkeypatch):
    """``--sweep`` and the multi-node options by flag, keyword and file, and through the worker's spec."""
    monkeypatch.chdir(tmp_path)
    values = {"command": ["train.py"], "nnodes": 2, "hosts": "a,b", "node_cmd": "ssh {host}", "listen": "me"}
    _values(tmp_path)
    monkeypatch.chdir(tmp_path / "work")
    by_cli = _by_cli(tmp_path, values, ["--sweep"])
    scen, spec = api.prepare("train.py", "power-loss", sweep=True, **{k: v for k, v in values.items() if k != "command"})
    (tmp_path / "work" / "chaosckpt.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    by_config = _by_cli(tmp_path, {"command": []}, ["--sweep"])
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"scenario": "power-loss", "params": {},
                                     "options": {**spec, "results_dir": str(by_cli.results_dir)}}))
    by_worker = worker_from_spec(spec_file)
    assert by_cli.sweep and by_cli.cluster.hosts == ["a", "b"] and by_cli.cluster.node_cmd == "ssh {host}"
    for opts in (from_spec({**spec, "results_dir": "x"}), by_config, by_worker):
        assert _comparable(opts) == _comparable(by_cli)


def test_a_suite_refuses_the_multi_node_options(tmp_path):
    (tmp_path / "chaosckpt.toml").write_text("command = 'train.py'\nnnodes = 2\n")
    with pytest.raises(Exception, match="nnodes is for chaosckpt run"):
        suite_command._new_plan(config.load(None, tmp_path), False, {})


def test_the_shipped_config_schema_is_the_one_derived_from_the_options():
    assert json.loads(SCHEMA_FILE.read_text()) == config.SCHEMA, (
        "regenerate it: python -c 'import json; from chaosckpt.conductor import config; "
        "print(json.dumps(config.SCHEMA, indent=2))' > chaosckpt/conductor/results/schemas/config.schema.json")


def test_the_settings_hold_every_key_a_file_may_set():
    held = {f.name for f in fields(config.SuiteConfig)} - {"source"}
    assert held == set(config.KEYS)


def test_help_version_and_usage_errors_import_no_torch():
    code = ("import sys\nfrom chaosckpt.conductor import cli\n"
            "for argv in (['--help'], ['--version'], ['run', '--help'], ['suite', '--help'], ['scenarios'], ['run']):\n"
            "    try:\n        cli.cli.main(argv, standalone_mode=False)\n    except BaseException:\n        pass\n"
            "print('torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(Path(option_table.__file__).parents[2])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.stdout.strip().splitlines()[-1] == "False", res.stderr


def test_the_api_types_every_option_keyword_and_no_other():
    from chaosckpt.conductor import api

    assert set(api.RunKeywords.__annotations__) == {o.keyword for o in option_table.OPTIONS}
