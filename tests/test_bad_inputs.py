"""A catalogue of bad inputs (command line, scenario files, configuration files, parameters): each is exit 2
with one line on stderr and no traceback, before any run starts, and the project folder is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosckpt.conductor import cli
from conftest import tree_digest

DEEP = "[" * 3000 + "]" * 3000
SCENARIOS = {
    "invalid.toml": 'name = "x"\nfault = "kill"\n[trigger\n',
    "deep.toml": f'name = "x"\nfault = "kill"\nv = {DEEP}\n',
    "deep-table.toml": 'name = "x"\nfault = "kill"\n[trigger]\nsave = ' + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
    "unknown-key.toml": 'name = "x"\nfault = "kill"\ncolour = "red"\n',
    "no-fault.toml": 'name = "x"\n',
    "unknown-fault.toml": 'name = "x"\nfault = "meteor"\n',
    "empty-name.toml": 'name = ""\nfault = "kill"\n',
    "trigger-not-table.toml": 'name = "x"\nfault = "kill"\ntrigger = 3\n',
    "save-string.toml": 'name = "x"\nfault = "kill"\n[trigger]\nsave = "two"\n',
    "fraction-nan.toml": 'name = "x"\nfault = "kill"\n[trigger]\nfraction = nan\n',
    "fraction-inf.toml": 'name = "x"\nfault = "kill"\n[trigger]\nfraction = inf\n',
    "recovered-not-list.toml": 'name = "x"\nfault = "kill"\n[expect]\nrecovered = "last-good"\n',
    "recovered-unknown.toml": 'name = "x"\nfault = "kill"\n[expect]\nrecovered = ["fine"]\n',
    "unknown-trigger-key.toml": 'name = "x"\nfault = "kill"\n[trigger]\nwhen = 3\n',
    "model-unknown.toml": 'name = "x"\nfault = "power-loss"\n[trigger]\nmodel = "lax"\n',
}
CONFIGS = {
    "invalid": "command = [\n",
    "deep": f"command = {DEEP}\n",
    "unknown-key": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ncolour = 1\n',
    "timeout-nan": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ntimeout = nan\n',
    "timeout-inf": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ntimeout = inf\n',
    "timeout-zero": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ntimeout = 0\n',
    "tolerance-nan": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ntolerance = nan\n',
    "tolerance-negative": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\ntolerance = -1\n',
    "jobs-zero": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\njobs = 0\n',
    "flake-negative": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nflake = -1\n',
    "scenarios-empty": 'command = "train.py"\nscenarios = []\n',
    "workdir-number": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nworkdir = 3\n',
    "command-number": 'command = 3\nscenarios = ["kill9-mid-save"]\n',
    "scenario-entry-bad": 'command = "train.py"\nscenarios = [{scenario = "kill9-mid-save", when = 1}]\n',
    "map-not-list": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nmap = "/scratch"\n',
    "map-missing": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nmap = ["/no/such/folder"]\n',
    "exclude-numbers": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nexclude = [1]\n',
    "exclude-outside": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nexclude = ["../x"]\n',
    "both-resumes": 'command = "train.py"\nscenarios = ["kill9-mid-save"]\nresume_args = "-r"\nresume_command = "x"\n',
}
RUN = ["run", "train.py", "-s", "kill9-mid-save"]
CASES = {
    "timeout-nan": RUN + ["--timeout", "nan"],
    "timeout-inf": RUN + ["--timeout", "inf"],
    "timeout-minus-inf": RUN + ["--timeout", "-inf"],
    "timeout-zero": RUN + ["--timeout", "0"],
    "timeout-negative": RUN + ["--timeout", "-1"],
    "timeout-word": RUN + ["--timeout", "soon"],
    "tolerance-nan": RUN + ["--tolerance", "nan"],
    "tolerance-inf": RUN + ["--tolerance", "inf"],
    "tolerance-negative": RUN + ["--tolerance", "-0.1"],
    "tolerance-word": RUN + ["--tolerance", "loose"],
    "no-command": ["run", "-s", "kill9-mid-save"],
    "missing-script": ["run", "nope.py", "-s", "kill9-mid-save"],
    "script-outside": ["run", "../elsewhere.py", "-s", "kill9-mid-save"],
    "command-not-on-path": ["run", "-s", "kill9-mid-save", "--", "no-such-command-here"],
    "command-missing": ["run", "-s", "kill9-mid-save", "--", "/no/such/command"],
    "command-not-executable": ["run", "-s", "kill9-mid-save", "--", "./data.txt"],
    "command-a-folder": ["run", "-s", "kill9-mid-save", "--", "./sub"],
    "unknown-scenario": ["run", "train.py", "-s", "meteor-strike"],
    "missing-scenario-file": ["run", "train.py", "-s", "missing.toml"],
    "param-no-equals": RUN + ["-p", "save"],
    "param-no-key": RUN + ["-p", "=3"],
    "param-save-zero": RUN + ["-p", "save=0"],
    "param-save-fractional": RUN + ["-p", "save=1.5"],
    "param-fraction-nan": RUN + ["-p", "fraction=nan"],
    "param-fraction-two": RUN + ["-p", "fraction=2"],
    "param-unknown": RUN + ["-p", "colour=1"],
    "param-section": RUN + ["-p", "other.save=1"],
    "param-deep": RUN + ["-p", f"save={DEEP}"],
    "sweep-eval-left-on": ["run", "train.py", "-s", "eval-left-on", "--sweep"],
    "sweep-rank-skew": ["run", "train.py", "-s", "rank-epoch-skew", "--sweep"],
    "resume-cmd-unclosed": RUN + ["--resume-cmd", "bash 'resume.sh"],
    "resume-cmd-empty": RUN + ["--resume-cmd", ""],
    "resume-both": RUN + ["--resume-cmd", "bash r.sh", "--resume-args", "--r"],
    "workdir-missing": RUN + ["--workdir", "nowhere"],
    "workdir-a-file": RUN + ["--workdir", "data.txt"],
    "nproc-zero": RUN + ["--nproc", "0"],
    "nproc-with-command": ["run", "-s", "kill9-mid-save", "--nproc", "2", "--", "bash", "x.sh"],
    "nproc-word": RUN + ["--nproc", "two"],
    "nproc-beyond-the-machine": RUN + ["--nproc", "100000"],
    "suite-nproc-beyond-the-machine": ["suite", "train.py", "-s", "kill9-mid-save", "--nproc", "100000"],
    "max-resumes-negative": RUN + ["--max-resumes", "-1"],
    "map-missing": RUN + ["--map", "/no/such/folder"],
    "map-a-file": RUN + ["--map", "data.txt"],
    "map-root": RUN + ["--map", "/"],
    "map-inside-workdir": RUN + ["--map", "sub"],
    "exclude-outside": RUN + ["--exclude", "../x"],
    "exclude-workdir": RUN + ["--exclude", "."],
    "ckpt-dir-outside": RUN + ["--ckpt-dir", "../x"],
    "out-a-file": RUN + ["--out", "data.txt"],
    "unknown-option": RUN + ["--colour"],
    "scenario-missing-value": ["run", "train.py", "-s"],
    "unknown-command": ["fly"],
    "suite-missing-config": ["suite", "--config", "missing.toml"],
    "suite-timeout-nan": ["suite", "train.py", "-s", "kill9-mid-save", "--timeout", "nan"],
    "suite-jobs-zero": ["suite", "train.py", "-s", "kill9-mid-save", "-j", "0"],
    "suite-flake-negative": ["suite", "train.py", "-s", "kill9-mid-save", "--flake", "-1"],
    **{f"scenario-{name}": ["run", "train.py", "-s", name] for name in SCENARIOS},
    **{f"config-{name}": ["suite", "--config", f"{name}.chaosckpt.toml"] for name in CONFIGS},
    "pyproject-without-table": ["suite", "--config", "pyproject.toml"],
    "scenario-not-utf8": ["run", "train.py", "-s", "latin1.toml"],
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-inputs") / "project"
    (root / "sub").mkdir(parents=True)
    (root / "train.py").write_text("raise SystemExit('the job must never start on bad input')\n")
    (root / "data.txt").write_text("not a program\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "latin1.toml").write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    for name, text in SCENARIOS.items():
        (root / name).write_text(text)
    for name, text in CONFIGS.items():
        (root / f"{name}.chaosckpt.toml").write_text(text)
    return root


def test_the_catalogue_holds_sixty_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(name, project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    before = tree_digest(project)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(CASES[name])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chaosckpt: error: "), err
    assert "Traceback" not in err and out == ""
    assert tree_digest(project) == before
