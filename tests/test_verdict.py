"""The verdict decided in one place: typed finding kinds and their severities, status from the findings and what
the steps measured, findings silenced by ``ignore``, and notes that never contradict what the trial showed."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from chaosckpt import checkpoint_content, protocol
from chaosckpt.conductor import cli
from chaosckpt.conductor.errors import ExitCode
from chaosckpt.conductor.results.result import Finding, Trial
from chaosckpt.conductor.results.stored import trial_from_dict
from chaosckpt.conductor.trial import render, verdict
from test_cli_errors import usage_error

PACKAGE = Path(protocol.__file__).resolve().parent


def _strings(node: ast.AST) -> list:
    """The string constants an expression can be: a literal, or either branch of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


PASSED_ON = {("compare.py", "kind")}
"""Finding sites whose kind is a loop variable over constants typed ``FindingKind`` elsewhere (``rng_capture``)."""


def _assigned(tree: ast.Module) -> dict:
    """Every string a name is assigned anywhere in a module (``KIND = "x"``; ``kind, advice = "x", ...``)."""
    names: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names.setdefault(node.target.id, []).extend(_strings(node.value))
            if getattr(node.annotation, "id", None) == "FindingKind":
                names.setdefault("typed kinds", []).extend(_strings(node.value))
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = ([(target, node.value)] if isinstance(target, ast.Name) else
                     list(zip(target.elts, node.value.elts)) if isinstance(target, ast.Tuple)
                     and isinstance(node.value, ast.Tuple) else [])
            for name, value in pairs:
                if isinstance(name, ast.Name):
                    names.setdefault(name.id, []).extend(_strings(value))
    return names


def emitted_kinds() -> dict:
    """Kind -> where, for every ``Finding(kind, ...)`` in the conductor and every ``{"kind": ...}`` finding the
    agent's checkpoint scan reports; a kind the scan cannot resolve to strings fails the test."""
    found: dict = {}
    for path in sorted((PACKAGE / "conductor").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = _assigned(tree)
        found.update((k, f"{path.name}: a constant typed FindingKind") for k in names.get("typed kinds", []))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and node.args):
                continue
            first = node.args[0]
            kinds = _strings(first) or (names.get(first.id, []) if isinstance(first, ast.Name) else [])
            if path.name == "stored.py" or isinstance(first, ast.Subscript) or \
                    (path.name, getattr(first, "id", None)) in PASSED_ON:
                continue  # read back from a stored result, or passed on from the agent's scan (checked below)
            assert kinds, f"{path}:{node.lineno}: a finding whose kind is not a literal"
            for kind in kinds:
                found.setdefault(kind, f"{path.name}:{node.lineno}")
    source = ast.parse(Path(checkpoint_content.__file__).read_text())
    for node in ast.walk(source):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "kind" and _strings(value):
                    found.setdefault(_strings(value)[0], f"checkpoint_content.py:{node.lineno}")
    return found


def test_every_finding_kind_emitted_is_declared_with_a_severity():
    found = emitted_kinds()
    undeclared = {k: where for k, where in found.items() if k not in protocol.FINDING_KINDS}
    assert not undeclared
    assert len(found) >= 25  # the scan sees the findings, not a handful
    assert set(protocol.SEVERITY) == set(protocol.FINDING_KINDS)


def test_a_finding_takes_its_kind_s_severity():
    assert Finding("resume-exited", "m").severity == "error"
    assert Finding("rng-states-missing", "m").severity == "warning"
    assert Finding("sweep", "m").severity == "note"
    assert Finding("rng-states-missing", "m", severity="note").severity == "note"


@pytest.mark.parametrize("met, kinds, ignored, expected", [
    (None, [], [], "inconclusive"),
    (None, ["resume-exited"], [], "inconclusive"),
    (True, [], [], "passed"),
    (True, ["rng-states-missing", "sweep"], [], "passed"),
    (True, ["acknowledged-checkpoint-lost"], [], "failed"),
    (True, ["acknowledged-checkpoint-lost"], ["acknowledged-checkpoint-lost"], "passed"),
    (True, ["resume-exited", "ranks-disagree"], ["resume-exited"], "failed"),
    (False, [], [], "failed"),
    (False, ["rng-not-restored"], ["rng-not-restored"], "failed"),
    # a sweep that left classes of crash state untried: never passed, whatever capped it; a failure still fails
    (True, ["sweep", "sweep-untried"], [], "inconclusive"),
    (False, ["sweep-untried"], [], "failed"),
    (True, ["sweep-untried", "acknowledged-checkpoint-lost"], [], "failed"),
    (True, ["sweep-untried"], ["sweep-untried"], "passed"),
])
def test_status_is_decided_from_what_was_measured_and_the_error_findings(met, kinds, ignored, expected):
    findings = verdict.settle([Finding(k, k) for k in kinds], ignored, reproduced=None)
    assert verdict.status(met, findings) == expected


def _rng_missing() -> Finding:
    [item] = [f for f in checkpoint_content.findings({"bloat": [], "progress": ["step"], "rng_states": [],
                                                      "loader_states": []}, streams=["torch"])
              if f["kind"] == "rng-states-missing"]
    return Finding(item["kind"], item["message"], {k: v for k, v in item.items() if k not in ("kind", "message")})


def test_a_reproduced_trajectory_turns_a_predicted_divergence_into_a_note():
    finding = _rng_missing()
    assert "the run diverges" in finding.message and finding.severity == "warning"
    [kept] = verdict.settle([finding], [], reproduced=False)
    assert kept.message == finding.message and kept.severity == "warning"
    [note] = verdict.settle([finding], [], reproduced=True)
    assert note.severity == "note" and "diverges" not in note.message
    assert note.message.startswith("this checkpoint carries no RNG states for the 1 random stream (torch) the loop "
                                   "draws from, yet the resumed run reproduced the uninterrupted one")


def test_the_headline_never_names_an_ignored_cause():
    trial = Trial(scenario="s", status="failed", headline="", outcome="last-good", recovered_step=4,
                  first_divergent_step=6, reproduced=False,
                  findings=[Finding("rng-not-restored", "the torch stream was not restored")])
    assert render.headline(trial).endswith(": the torch stream was not restored")
    trial.findings = verdict.settle(trial.findings, ["rng-not-restored"], reproduced=False)
    assert render.headline(trial) == "FAILED s: resumed from the last good checkpoint (step 4) but diverged from the " \
                                     "uninterrupted run at step 6"
    assert "  - rng-not-restored (ignored): the torch stream was not restored" in render.text(trial)


@pytest.mark.parametrize("of", ["copy_of", "link_of"])
def test_a_lost_copy_or_hard_link_leads_when_the_checkpoint_itself_survived(of):
    lost = Finding("acknowledged-checkpoint-lost", "ckpt/best.pt did not survive", {"path": "ckpt/best.pt",
                                                                                     of: "ckpt/last.pt"})
    trial = Trial(scenario="s", status="failed", headline="", outcome="last-good", recovered_step=16, findings=[lost])
    assert verdict.cause(trial) is lost
    assert render.headline(trial) == ("FAILED s: ckpt/best.pt did not survive; the checkpoint itself survived and the "
                                      "job resumed from it (step 16)")


def test_rng_states_missing_is_a_note_when_every_stream_was_as_before_at_the_resume_whatever_else_diverged():
    [kept] = verdict.settle([_rng_missing()], [], reproduced=False, streams_restored=False)
    assert kept.severity == "warning"
    [disproved] = verdict.settle([_rng_missing()], [], reproduced=False, streams_restored=True)
    assert disproved.severity == "note" and "yet at the resume each stream was as in the uninterrupted run" in \
        disproved.message


def test_severity_and_ignored_round_trip_through_a_stored_result():
    trial = Trial(scenario="s", status="passed", headline="h",
                  findings=verdict.settle([_rng_missing()], ["rng-states-missing"], reproduced=True))
    doc = json.loads(json.dumps(trial.to_dict()))
    assert doc["findings"][0]["severity"] == "note" and doc["findings"][0]["ignored"] is True
    [back] = trial_from_dict(doc).findings
    assert (back.severity, back.ignored, back.details) == ("note", True, trial.findings[0].details)


def test_unknown_ignored_kind_is_a_usage_error_naming_close_matches(project):
    line = usage_error(project, "run", "train.py", "-s", "kill9-mid-save", "--ignore", "rng-state-missing")
    assert line.startswith("chaosckpt: error: --ignore: 'rng-state-missing' is not a finding kind; did you mean "
                           "rng-states-missing")
    (project / "pyproject.toml").write_text('[tool.chaosckpt]\ncommand = "train.py"\nignore = ["torn-checkpiont"]\n')
    line = usage_error(project, "suite")
    assert "tool.chaosckpt.ignore: 'torn-checkpiont' is not a finding kind; did you mean torn-checkpoint" in line


def test_ignore_reaches_the_trial_from_config_and_command_line(project, monkeypatch, tmp_path):
    (project / "pyproject.toml").write_text('[tool.chaosckpt]\ncommand = "train.py"\nignore = ["no-loader-state"]\n')
    monkeypatch.chdir(project)
    given = []

    def judged(scenario, opts):
        given.append(opts.ignore)
        findings = [Finding("acknowledged-checkpoint-lost", "the checkpoint of step 4 was lost")]
        return Trial(scenario=scenario.name, status=verdict.status(True, verdict.settle(findings, opts.ignore, True)),
                     headline="h", findings=verdict.settle(findings, opts.ignore, True))

    monkeypatch.setattr("chaosckpt.conductor.trial.run_trial", judged)
    for extra, code in (([], ExitCode.FAILED), (["--ignore", "acknowledged-checkpoint-lost"], ExitCode.PASSED)):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["run", "-s", "kill9-mid-save", "--json", "--out", str(tmp_path / "r"), *extra])
        assert exit_info.value.code == code
    assert given == [["no-loader-state"], ["acknowledged-checkpoint-lost"]]  # the command line replaces the file's
