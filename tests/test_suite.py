"""``chaosckpt suite`` end to end: real jobs, a shared reference run, reports, history, seeded random trials."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sqlite3
from datetime import datetime
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, assert_envelope, processes_of, read_junit, run_chaosckpt

pytestmark = pytest.mark.e2e


def example(tmp_path: Path, name: str, config: str, folder: Path = REPO / "examples") -> Path:
    """A project of one job (an example, or a test job with ``folder``) as ``train.py``, configured by ``config``."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(folder / name, project / "train.py")
    (project / "chaosckpt.toml").write_text(config)
    return project


def suite_folder(project: Path) -> Path:
    folders = sorted((project / "chaosckpt-results").glob("*-suite*"))
    return folders[-1]


def replays(stdout: str):
    return [line.split("replay: ", 1)[1] for line in stdout.splitlines() if line.strip().startswith("replay: ")]


def test_robust_suite_passes_reuses_its_reference_and_repeats_its_random_points(tmp_path):
    project = example(tmp_path, "robust_train.py", 'command = "train.py --epochs 2"\njobs = 2\nscenarios = ["kill9-mid-save"]\n')

    first = run_chaosckpt(["suite", "--trials", "2", "--seed", "11"], cwd=project)
    second = run_chaosckpt(["suite", "--trials", "2", "--seed", "11"], cwd=project)

    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert "reference run done" in first.stderr and "reference run reused from the cache" in second.stderr
    folders = sorted((project / "chaosckpt-results").glob("*-suite*"))
    assert len(folders) == 2
    plans = [json.loads((f / "suite.json").read_text()) for f in folders]
    points = [[(t["id"], t["params"]) for t in p["trials"]] for p in plans]
    assert points[0] == points[1] and len(points[0]) == 2
    assert all(1 <= params["save"] <= 2 and 0 <= params["fraction"] < 1 for _, params in points[0])
    verdicts = [[(t["status"], t["recovered_step"], t["lost_steps"]) for t in json.loads((f / "result.json").read_text())["trials"]]
                for f in folders]
    assert verdicts[0] == verdicts[1] and all(v[0] == "passed" for v in verdicts[0])
    for folder in folders:
        for name in ("report.html", "junit.xml", "summary.md"):
            assert (folder / name).stat().st_size > 0
        [junit_suite] = list(read_junit(folder / "junit.xml"))
        assert [c.name for c in junit_suite] == [i for i, _ in points[0]]
        assert junit_suite.hostname and "T" in junit_suite.timestamp
        assert {p.name for p in junit_suite.properties()} >= {"seed", f"{points[0][0][0]}.replay", f"{points[0][0][0]}.params"}
        assert "<svg" in (folder / "report.html").read_text()
    # the second suite did not run a reference of its own: its reference is the cached one
    assert json.loads((folders[1] / "reference" / "run.json").read_text()) == json.loads((folders[0] / "reference" / "run.json").read_text())
    cache = project / ".chaosckpt"
    assert (cache / ".gitignore").read_text() == "*\n" and (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert "chaosckpt" in (cache / "README.md").read_text()
    with sqlite3.connect(cache / "history.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM suites").fetchone() == (2,)
        assert db.execute("SELECT COUNT(*), SUM(status = 'passed') FROM trials").fetchone() == (4, 4)
    history = run_chaosckpt(["history"], cwd=project)
    assert history.returncode == 0
    assert history.stdout.splitlines()[0] == "kill9-mid-save: passed 4 of 4 trials (100%) in the last 2 suites and runs"
    assert len(history.stdout.splitlines()) == 4


def test_naive_suite_fails_names_the_failing_trials_and_prints_lines_that_replay_them(tmp_path):
    project = example(tmp_path, "naive_train.py", """
command = "train.py --epochs 2"
jobs = 2
[[scenarios]]
scenario = "kill9-mid-save"
id = "first-save"
params = { save = 1 }
[[scenarios]]
scenario = "kill9-mid-save"
params = { save = 2, fraction = 0.25 }
""")

    res = run_chaosckpt(["suite"], cwd=project)

    assert res.returncode == 1, res.stdout + res.stderr
    folder = suite_folder(project)
    root = ET.parse(folder / "junit.xml").getroot()
    failed = {c.get("name"): c.find("failure") for c in root.iter("testcase")}
    assert set(failed) == {"first-save", "kill9-mid-save-save=2-fraction=0.25"}
    assert all(f is not None and f.get("message").startswith("FAILED kill9-mid-save: resume crashed") for f in failed.values())
    assert root.get("failures") == "2"
    assert "first-save" in (folder / "summary.md").read_text()
    lines = sorted(replays(res.stdout))  # streamed as the two workers finish them, in either order
    assert lines == ["chaosckpt run --scenario kill9-mid-save -p save=1 -- train.py --epochs 2",
                     "chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.25 -- train.py --epochs 2"]

    argv = shlex.split(lines[1])[1:]
    argv[argv.index("--"):argv.index("--")] = ["--json", "--out", str(tmp_path / "replay")]
    replay = run_chaosckpt(argv, cwd=project)

    assert replay.returncode == 1
    trial = replay.trial
    stored = json.loads((folder / "trials" / "kill9-mid-save-save=2-fraction=0.25" / "result.json").read_text())["trials"][0]
    assert (trial["fault"]["save"], trial["fault"]["bytes"], trial["outcome"]) == (
        stored["fault"]["save"], stored["fault"]["bytes"], stored["outcome"])


def test_an_interrupted_suite_exits_130_and_resume_redoes_nothing_that_finished(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    project = example(tmp_path, "robust_train.py", """
command = "train.py --epochs 2"
[[scenarios]]
scenario = "kill9-mid-save"
id = "first"
[[scenarios]]
scenario = "kill9-mid-save"
id = "second"
params = { save = 2, fraction = 0.9 }
""")
    results = project / "chaosckpt-results"
    proc = subprocess.Popen([sys.executable, "-m", "chaosckpt", "suite"], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(results.glob("*/trials/first/result.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    second_running = []
    while not second_running and time.monotonic() < deadline:  # interrupt while the second trial's job runs
        second_running = [pid for trial in results.glob("*/trials/second") for pid in processes_of(trial)]
        time.sleep(0.05)
    assert second_running, "the second trial's job never ran"
    os_killpg = __import__("os").killpg
    os_killpg(proc.pid, signal.SIGINT)  # Ctrl-C on a terminal: the whole foreground group
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130, err
    assert "Interrupted" in err and "continue it with: chaosckpt suite --resume" in err
    assert processes_of(results) == []
    folder = suite_folder(project)
    assert (folder / "prefixes" / "save-2" / "prefix.json").is_file()  # the two kills in save 2 shared a faulted run
    assert sorted(folder.rglob("sandboxes")) == []  # its sandbox went with the trials' own; --resume runs it again
    first = folder / "trials" / "first" / "result.json"
    before = (first.stat().st_ino, first.stat().st_mtime_ns, first.read_text())
    assert not (folder / "trials" / "second" / "result.json").exists()

    resumed = run_chaosckpt(["suite", "--resume"], cwd=project)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming suite {folder}: 1 of 2 trials already done" in resumed.stderr
    assert (first.stat().st_ino, first.stat().st_mtime_ns, first.read_text()) == before
    assert [line.split(":")[0] for line in resumed.stdout.splitlines() if line.startswith("[")] == ["[2/2] PASSED second"]
    assert json.loads((folder / "suite.json").read_text())["state"] == "finished"
    assert len(json.loads((folder / "result.json").read_text())["trials"]) == 2
    again = run_chaosckpt(["suite", "--resume"], cwd=project)
    assert again.returncode == 2 and "nothing to resume" in again.stderr


def test_k_selects_trials_by_id_or_scenario_in_a_new_and_a_resumed_suite(tmp_path):
    project = example(tmp_path, "robust_train.py", """
command = "train.py --epochs 2"
[[scenarios]]
scenario = "kill9-mid-save"
id = "first"
[[scenarios]]
scenario = "kill9-mid-save"
id = "late"
params = { save = 2 }
""")
    typo = run_chaosckpt(["suite", "-k", "first and"], cwd=project)
    assert typo.returncode == 2 and '-k "first and": the expression ends too early' in typo.stderr
    none = run_chaosckpt(["suite", "-k", "enospc"], cwd=project)
    assert none.returncode == 2 and "matches none of the 2 trial(s) to run (first, late)" in none.stderr
    assert not (project / ".chaosckpt").exists()  # refused before the reference ran

    res = run_chaosckpt(["suite", "-k", "kill9 and not late", "--json"], cwd=project)

    assert res.returncode == 0, res.stdout + res.stderr
    doc = assert_envelope("suite", json.loads(res.stdout))
    assert [(t["id"], t["status"], t["result"]["status"]) for t in doc["trials"]] == [("first", "passed", "passed")]
    assert doc["summary"]["passed"] == 1 and Path(doc["reports"]["junit"]).is_file()
    assert datetime.fromisoformat(doc["created"]).tzinfo is not None
    assert '-k "kill9 and not late" selected 1 of 2 trial(s)' in res.stderr
    folder = suite_folder(project)
    assert [t["id"] for t in json.loads((folder / "suite.json").read_text())["trials"]] == ["first"]
    assert [c.name for c in list(read_junit(folder / "junit.xml"))[0]] == ["first"]

    # a suite interrupted with three trials to go: --resume -k runs only the one asked for
    plan = json.loads((folder / "suite.json").read_text())
    plan["trials"] += [{"id": "late", "scenario": "kill9-mid-save", "params": {"save": 2}},
                       {"id": "later", "scenario": "kill9-mid-save", "params": {"save": 2, "fraction": 0.9}}]
    plan["state"] = "running"
    (folder / "suite.json").write_text(json.dumps(plan))
    resumed = run_chaosckpt(["suite", "--resume", "-k", "late and not later"], cwd=project)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert '-k "late and not later" selected 1 of 2 trial(s)' in resumed.stderr
    statuses = {t.name: [r._tag for r in t.result] for t in list(read_junit(folder / "junit.xml"))[0]}
    assert statuses == {"first": [], "late": [], "later": ["skipped"]}
    assert json.loads((folder / "suite.json").read_text())["state"] == "running"  # "later" is still to run
    assert "later: not run yet; chaosckpt suite --resume runs it" in resumed.stdout
    with sqlite3.connect(project / ".chaosckpt" / "history.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM suites").fetchone() == (1,)  # the unfinished suite is not history yet


def test_a_one_machine_suite_skips_the_scenarios_that_need_more_nodes_and_says_why(tmp_path):
    """Every scenario skipped: no run at all, so this needs no training job to start."""
    shutil.copy(REPO / "tests" / "jobs" / "train_job.py", tmp_path / "train.py")
    res = run_chaosckpt(["suite", "train.py", "-s", "node-loss", "-s", "node-power-loss", "--out", "out"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "chaosckpt: skipping node-loss: node-loss needs a job on 2 or more machines" in res.stderr
    assert "reference run" not in res.stderr  # nothing to run, so no reference either
    assert res.stdout.count("SKIPPED node-loss: node-loss needs a job on 2 or more machines and this one runs on 1; "
                            "run it with chaosckpt run --nnodes N") == 1
    assert "2 skipped" in res.stdout
    folder = next((tmp_path / "out").glob("*-suite"))
    cases = {c.name: c for suite in read_junit(folder / "junit.xml") for c in suite}
    assert cases["node-power-loss"].result[0].message.startswith("skipped: node-power-loss needs a job on 2 or more")
    doc = json.loads((folder / "result.json").read_text())
    assert doc["trials"] == [] and [s["id"] for s in doc["skipped"]] == ["node-loss", "node-power-loss"]
    assert "| ⏭️ | `node-loss` |" in (folder / "summary.md").read_text()


def test_a_run_says_starting_until_its_first_step_and_a_halted_run_stops_at_its_fault():
    from chaosckpt.conductor.runs import progress

    stop = {"steps": 50, "after": [{"save": 2}]}
    assert progress.label(0, stop) == "starting"
    assert progress.label(7, stop) == "step 7 (stops 50 steps after save 2)"
    assert progress.label(7, stop, {"kind": "halt", "save": 2}) == "step 7 (stops at the fault in save 2)"
    assert progress.label(7, stop, {"kind": "enospc", "save": 2}) == "step 7 (stops 50 steps after save 2)"


def test_off_a_terminal_each_verdict_is_one_line_on_stdout_and_the_summary_does_not_repeat_it(tmp_path, capsys):
    from chaosckpt.conductor.commands import suite as suite_command
    from chaosckpt.conductor.results.suite_plan import PlannedTrial
    from chaosckpt.conductor.suite.plan_run import Finished

    trial = {"status": "failed", "headline": "FAILED kill9-mid-save: resume crashed",
             "findings": [{"kind": "torn-checkpoint", "message": "ckpt.pt is torn"}]}
    planned = PlannedTrial("kill9-mid-save", "kill9-mid-save")
    progress = suite_command.Progress(1, 0, lambda t: f"chaosckpt run --scenario {t.scenario}")
    progress.started(planned)
    progress.finished(Finished(planned, trial, 1, tmp_path / "worker.log"))
    out, err = capsys.readouterr()
    assert out.splitlines() == ["[1/1] FAILED kill9-mid-save: resume crashed", "  - torn-checkpoint: ckpt.pt is torn",
                                "  replay: chaosckpt run --scenario kill9-mid-save"]
    assert err == "" and progress.streamed == ["kill9-mid-save"]


def test_lf_reruns_only_what_failed_last_time_and_ff_runs_it_first(tmp_path):
    project = example(tmp_path, "preempt_job.py", 'command = "train.py --handler exit"\n'
                      'scenarios = ["kill9-mid-save", "preemption"]\n', REPO / "tests" / "jobs")
    first = run_chaosckpt(["suite", "--lf"], cwd=project)  # nothing recorded yet: everything runs
    assert first.returncode == 1, first.stdout + first.stderr
    assert "--lf: no earlier suite or run of this job is in the history; running every trial" in first.stderr
    assert "PASSED kill9-mid-save" in first.stdout and "FAILED preemption" in first.stdout

    again = run_chaosckpt(["suite", "--lf", "--json"], cwd=project)
    assert again.returncode == 1, again.stderr
    assert "--lf: 1 trial(s) failed or were inconclusive in the last suite or run" in again.stderr
    assert [(t["id"], t["status"]) for t in json.loads(again.stdout)["trials"]] == [("preemption", "failed")]

    first_failed = run_chaosckpt(["suite", "--ff"], cwd=project)
    assert first_failed.returncode == 1
    plan = json.loads((suite_folder(project) / "suite.json").read_text())
    assert [t["id"] for t in plan["trials"]] == ["preemption", "kill9-mid-save"]
    both = run_chaosckpt(["suite", "--lf", "--ff"], cwd=project)
    assert both.returncode == 2 and "give one" in both.stderr


def test_plan_lists_the_trials_and_their_cost_and_max_minutes_leaves_out_what_would_not_fit(tmp_path):
    project = example(tmp_path, "preempt_job.py", 'command = "train.py"\n'
                      'scenarios = ["kill9-mid-save", { scenario = "power-loss", sweep = true }]\n', REPO / "tests" / "jobs")
    unknown = run_chaosckpt(["suite", "--plan"], cwd=project)
    assert unknown.returncode == 0, unknown.stderr
    assert unknown.stdout.splitlines()[1:3] == ["  kill9-mid-save: 2 runs",
                                                "  power-loss-sweep: 9 runs (at most: one per class of crash state)"]
    assert "whose length is not known yet" in unknown.stdout
    assert sorted(p.name for p in project.iterdir()) == ["chaosckpt.toml", "train.py"]  # --plan runs and makes nothing

    cut = run_chaosckpt(["suite", "--max-minutes", "0.001"], cwd=project)  # the reference runs, then nothing fits
    assert cut.returncode == 0, cut.stderr
    assert "--max-minutes 0.001: left out 2 trial(s) that would not fit" in cut.stderr
    assert "SKIPPED kill9-mid-save: left out by --max-minutes" in cut.stdout

    known = run_chaosckpt(["suite", "--plan", "-j", "2"], cwd=project)
    assert re.match(r"  kill9-mid-save: 2 runs ~\d+\.\d min$", known.stdout.splitlines()[1])
    assert re.search(r"total: 11 runs of about \d+ s each .* with 2 trial\(s\) at a time", known.stdout)


def test_the_default_suite_sweeps_the_save_of_the_kill_and_the_power_loss_of_a_one_process_job(tmp_path):
    project = example(tmp_path, "robust_train.py", 'command = "train.py"\n')
    one = run_chaosckpt(["suite", "--plan"], cwd=project)
    assert one.returncode == 0, one.stderr
    swept = [line.split(":")[0].strip() for line in one.stdout.splitlines() if "sweep" in line]
    assert swept == ["kill9-mid-save-sweep", "power-loss-sweep"]
    two = run_chaosckpt(["suite", "--plan", "--nproc", "2"], cwd=project)
    assert two.returncode == 0 and "sweep" not in two.stdout, two.stdout + two.stderr


SAVES_BY_FOLDER = """\
import os, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
os.makedirs("ckpt", exist_ok=True)
for step in range(1, 13):
    loss = model(torch.ones(2, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    # a save that one run makes and another does not, as a racy saver would; here, by the folder it runs in
    if step % 4 == 0 and not (step == 8 and os.getcwd().endswith("run-1")):
        torch.save({"model": model.state_dict(), "step": step}, "ckpt/last.pt")
"""


@pytest.mark.parametrize("job, config, expected", [
    ("robust_train.py", 'command = "train.py"\n', None),
    ("train_job.py", 'command = "train.py --seed time"\n', "left the first run's losses or parameters at step 1"),
    (None, 'command = "train.py"\n', "made no save at step 8, where the first run saved"),
], ids=["deterministic", "unseeded", "a save one run does not make"])
def test_flake_runs_the_job_again_before_the_trials_and_a_difference_makes_every_trial_inconclusive(
        tmp_path, job, config, expected):
    if job is None:
        project = tmp_path / "project"
        project.mkdir()
        (project / "train.py").write_text(SAVES_BY_FOLDER)
        (project / "chaosckpt.toml").write_text(config)
    else:
        project = example(tmp_path, job, config, REPO / ("examples" if job.startswith("robust") else "tests/jobs"))
    res = run_chaosckpt(["suite", "-s", "kill9-mid-save", "-s", "enospc", "--flake", "1", "--json"], cwd=project)
    trials = res.doc["trials"]
    if expected is None:
        assert res.returncode == 0, res.stderr
        assert "flake check: 2 uninterrupted runs took the same steps, losses and saves" in res.stderr
        assert {t["status"] for t in trials} == {"passed"}
        return
    assert res.returncode == 4, res.stderr
    assert f"flake check: uninterrupted run 2 of 2 {expected}" in res.stderr
    for trial in trials:
        assert (trial["status"], trial["result"]["reason"]) == ("inconclusive", "baseline-nondeterministic")
        assert expected in trial["result"]["detail"] and not trial["result"]["runs"], "no trial ran"
