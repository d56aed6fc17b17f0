"""``chaosckpt init``: a first configuration, a pytest test and a workflow, written from the training script, with
the resume arguments guessed from its argparse flags; nothing that exists is overwritten."""

from __future__ import annotations

import sys

import pytest
from conftest import run_chaosckpt, tree_digest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PLAIN = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--epochs', type=int)\n"
RESUMING = PLAIN + "p.add_argument('--resume', action='store_true')\n"
DISTRIBUTED = RESUMING + "import torch.distributed as dist\ndist.init_process_group('gloo')\n"


def project(tmp_path, script: str, pyproject: str = ""):
    (tmp_path / "train.py").write_text(script)
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


def test_a_plain_script_gets_chaosckpt_toml_a_test_and_a_workflow(tmp_path):
    root = project(tmp_path, PLAIN)
    (root / "tests").mkdir()
    res = run_chaosckpt(["init", "train.py", "--", "--epochs", "2"], cwd=root)
    assert res.returncode == 0, res.stderr
    conf = tomllib.loads((root / "chaosckpt.toml").read_text())
    assert conf["command"] == "train.py --epochs 2" and "resume_args" not in conf and "nproc" not in conf
    assert conf["scenarios"] == ["kill9-mid-save", "enospc", "power-loss", "eval-left-on", "preemption",
                                 {"scenario": "kill9-mid-save", "sweep": True}, {"scenario": "power-loss", "sweep": True}]
    test = (root / "tests" / "test_chaosckpt_resilience.py").read_text()
    compile(test, "test_chaosckpt_resilience.py", "exec")
    assert "JOB = ['train.py', '--epochs', '2']" in test
    assert "chaosckpt suite" in (root / ".github" / "workflows" / "chaosckpt.yml").read_text()
    assert "no --resume-like flag found" in res.stdout
    plan = run_chaosckpt(["suite", "--plan"], cwd=root)  # the configuration is one chaosckpt reads
    assert plan.returncode == 0 and "  preemption: 2 runs" in plan.stdout, plan.stderr
    assert "  power-loss-sweep: 9 runs (at most: one per class of crash state)" in plan.stdout


def test_a_resume_flag_and_torch_distributed_go_into_pyproject_s_new_section(tmp_path):
    root = project(tmp_path, DISTRIBUTED, '[project]\nname = "mine"\n')
    res = run_chaosckpt(["init", "train.py", "--no-ci", "--no-test"], cwd=root)
    assert res.returncode == 0, res.stderr
    doc = tomllib.loads((root / "pyproject.toml").read_text())
    assert doc["project"] == {"name": "mine"}
    conf = doc["tool"]["chaosckpt"]
    assert (conf["resume_args"], conf["nproc"], conf["scenarios"][-1]) == ("--resume", 2, "rank-epoch-skew")
    assert all(isinstance(s, str) for s in conf["scenarios"]), "no sweeps for several ranks: nothing shares their faulted run"
    assert sorted(p.name for p in root.iterdir()) == ["pyproject.toml", "train.py"]


@pytest.mark.parametrize("existing, pyproject, word", [
    ("chaosckpt.toml", "", "chaosckpt.toml already exists"),
    (".github/workflows/chaosckpt.yml", "", "chaosckpt.yml already exists"),
    ("test_chaosckpt_resilience.py", "", "test_chaosckpt_resilience.py already exists"),
    (None, '[tool.chaosckpt]\ncommand = "train.py"\n', "already has a [tool.chaosckpt] section"),
    (None, '[tool.chaosckpt.slurm]\npartition = "gpu"\n', "already has a [tool.chaosckpt] section"),
])
def test_nothing_that_exists_is_overwritten(tmp_path, existing, pyproject, word):
    root = project(tmp_path, RESUMING, pyproject)
    if existing:
        (root / existing).parent.mkdir(parents=True, exist_ok=True)
        (root / existing).write_text("mine\n")
    before = tree_digest(root)
    res = run_chaosckpt(["init", "train.py"], cwd=root)
    assert res.returncode == 2 and word in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert tree_digest(root) == before


def test_a_missing_script_is_a_usage_error(tmp_path):
    res = run_chaosckpt(["init", "nope.py"], cwd=tmp_path)
    assert res.returncode == 2 and "no script nope.py" in res.stderr and list(tmp_path.iterdir()) == []


def test_a_resume_flag_that_takes_a_value_is_named_not_guessed(tmp_path):
    root = project(tmp_path, PLAIN + "p.add_argument('--resume_from_checkpoint', type=str)\n")
    res = run_chaosckpt(["init", "train.py", "--no-ci", "--no-test"], cwd=root)
    assert res.returncode == 0, res.stderr
    text = (root / "chaosckpt.toml").read_text()
    assert "resume_args" not in tomllib.loads(text)
    assert "--resume_from_checkpoint takes a value chaosckpt cannot guess" in text and "cannot guess" in res.stdout
