"""Bad input gets one line on stderr and exit code 2, never a traceback, and touches nothing of the user's."""

from __future__ import annotations


import pytest

from chaosckpt.conductor import cli
from chaosckpt.conductor.errors import ExitCode
from conftest import run_chaosckpt, tree_digest


def usage_error(project, *args):
    before = tree_digest(project)
    res = run_chaosckpt(list(args), cwd=project)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chaosckpt: error: ")
    assert res.stdout == ""
    assert tree_digest(project) == before
    return lines[0]


def test_missing_script(project):
    assert "script nope.py does not exist" in usage_error(project, "run", "nope.py", "-s", "kill9-mid-save")


def test_unknown_scenario_lists_the_known_ones(project):
    line = usage_error(project, "run", "train.py", "-s", "kill-everything")
    assert "unknown scenario 'kill-everything'" in line and "kill9-mid-save" in line


def test_malformed_scenario_file_names_file_and_line(project):
    (project / "bad.toml").write_text('name = "x"\nfault = "kill"\n[trigger\nsave = 2\n')
    line = usage_error(project, "run", "train.py", "-s", "bad.toml")
    assert "bad.toml" in line and "line 3" in line


def test_unknown_key_in_scenario_file(project):
    (project / "typo.toml").write_text('name = "x"\nfault = "kill"\n[trigger]\nsafe = 2\n')
    line = usage_error(project, "run", "train.py", "-s", "typo.toml")
    assert "unknown key 'trigger.safe'" in line


@pytest.mark.parametrize(
    "param, message",
    [
        ("save=0", "trigger.save must be a whole number >= 1"),
        ("fraction=1.5", "trigger.fraction must be a number in [0, 1)"),
        ("write=-1", "trigger.write must be a whole number >= 1"),
        ("save", "expected KEY=VALUE"),
        ("expect.recovered=['sometimes']", "expect.recovered must list outcomes"),
    ],
)
def test_invalid_trigger_values(project, param, message):
    assert message in usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "-p", param)


def test_unwritable_results_directory(project):
    (project / "a-file").write_text("")
    line = usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "--out", "a-file/results")
    assert "cannot write results to a-file/results" in line


def test_unknown_option(project):
    assert "--frobnicate" in usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "--frobnicate")


def test_no_command(project):
    assert "give a training script" in usage_error(project, "run", "-s", "kill9-mid-save")


def test_negative_tolerance(project):
    assert "--tolerance -1 is invalid" in usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "--tolerance", "-1")


def test_internal_error_writes_a_crash_report(project, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(project)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)

    def broken(*args, **kwargs):
        raise ValueError("a bug in the scorer")

    monkeypatch.setattr("chaosckpt.conductor.trial.run_trial", broken)  # run imports it when a trial runs
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "train.py", "-s", "kill9-mid-save", "--out", str(tmp_path / "r")])
    assert exit_info.value.code == ExitCode.INTERNAL
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("chaosckpt: internal error (ValueError: a bug in the scorer); crash report: ")
    report = err.rsplit(": ", 1)[1]
    assert "a bug in the scorer" in open(report).read() and "Traceback" in open(report).read()


def test_scenarios_lists_the_builtins(project):
    res = run_chaosckpt(["scenarios"], cwd=project)
    assert res.returncode == 0
    names = [line for line in res.stdout.splitlines() if line and not line.startswith(" ")]
    assert {"kill9-mid-save", "enospc", "power-loss"} <= set(names)
    assert "parameters: save=2, fraction=0.5" in res.stdout and 'model=ordered' in res.stdout


def test_help_documents_exit_codes(project):
    res = run_chaosckpt(["run", "--help"], cwd=project)
    assert res.returncode == 0
    for code in ("0  every trial passed", "1  some trial failed", "2  usage error", "3  internal error", "4  inconclusive"):
        assert code in res.stdout


@pytest.mark.parametrize("name, expected", [("node", "--node-rank K"), ("report", "Exit codes:"), ("history", "Exit codes:")])
def test_every_help_page_is_clicks_and_the_reading_commands_state_their_exit_codes(tmp_path, name, expected):
    res = run_chaosckpt([name, "--help"], cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout.startswith(f"Usage: chaosckpt {name} [OPTIONS]") and expected in res.stdout


@pytest.mark.parametrize("scenario, needs, flag", [("node-loss", "2 or more machines", "--nnodes N"),
                                                    ("node-power-loss", "2 or more machines", "--nnodes N"),
                                                    ("rank-epoch-skew", "2 or more ranks", "--nproc N")])
def test_a_scenario_the_job_is_too_small_for_is_refused_before_any_run(project, scenario, needs, flag):
    line = usage_error(project, "run", "train.py", "-s", scenario)
    assert needs in line and flag in line and "trigger." not in line
    assert not (project / "chaosckpt-results").exists()  # no reference, no faulted run spent


def test_a_misspelled_scenario_gets_the_close_match(project):
    assert "unknown scenario 'kil9-mid-save'; did you mean kill9-mid-save?" in usage_error(
        project, "run", "train.py", "-s", "kil9-mid-save")


def test_a_bad_parameter_is_blamed_on_the_flag_or_the_file_that_gave_it(project):
    line = usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "-p", "save=0")
    assert line.startswith("chaosckpt: error: --param save=0: trigger.save") and "scenarios/" not in line
    (project / "chaosckpt.toml").write_text('command = ["train.py"]\n[[scenarios]]\nscenario = "kill9-mid-save"\n'
                                            'params = { save = 0 }\n')
    line = usage_error(project, "suite")
    assert f"{project / 'chaosckpt.toml'}: params of kill9-mid-save: save = 0: trigger.save must be" in line
    assert "scenarios/kill9-mid-save.toml" not in line
