"""The horizon and fault placements: parsing, where a fault lands among the reference's saves, when the
agent stops a job, and how a stopped run is scored."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import run_chaosckpt

from chaosckpt.agent.stopping import Horizon
from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.faults import placement
from chaosckpt.conductor.faults.arming import NotArmable
from chaosckpt.conductor.faults.trigger import duration_s
from chaosckpt.conductor.runs import cache, horizon, launcher
from chaosckpt.conductor.runs.launcher import RunSpec
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import compare


def saves_at(steps, start=100.0, every_s=60.0):
    """A reference run that saved after each of ``steps``, one save a minute, and took one step past the last."""
    proc = ProcessLog(pid=1, hello={"ts": start})
    for i, at in enumerate(steps, 1):
        proc.saves.append(Save(index=i, step=at, path="/w/c.pt", digest=f"d{at}", ts=start + i * every_s, ok=True))
    proc.steps = [{"step": n, "ts": start + n, "loss": [float(n)], "pfp": str(n)} for n in range(1, steps[-1] + 2)]
    return RunLog([proc])


REFERENCE = saves_at([100, 200, 300, 400])


def placed(**params):
    return placement.resolve(scenarios.load("kill9-mid-save", params), REFERENCE).trigger.save


def test_a_step_places_the_fault_at_the_first_save_at_or_after_it():
    assert placed(step=200) == 2
    assert placed(step=201) == 3
    assert placed(step=0) == 1


def test_a_time_places_the_fault_at_the_first_save_at_or_after_it():
    assert placed(after="2m") == 2
    assert placed(after=121) == 3
    assert placed(after="0.05h") == 3


def test_a_negative_save_counts_from_the_end_of_the_reference():
    assert placed(save=-1) == 4
    assert placed(save=-4) == 1
    assert placed(save=3) == 3


@pytest.mark.parametrize("params", [{"step": 401}, {"after": "1h"}, {"save": -5}])
def test_a_placement_past_the_reference_is_not_armable(params):
    with pytest.raises(NotArmable, match="none"):
        placed(**params)


@pytest.mark.parametrize("params, message", [
    ({"after": "soon"}, "trigger.after must be a time into the run"),
    ({"after": "-5m"}, "trigger.after must be a time into the run"),
    ({"step": -1}, "trigger.step must be a whole number >= 0"),
    ({"step": "x"}, "trigger.step must be a whole number >= 0"),
    ({"save": 0}, r"trigger.save must be a whole number >= 1 \(or negative, -N"),
    ({"step": 5, "save": 2}, "both place the fault"),
])
def test_bad_placements_are_usage_errors(params, message):
    with pytest.raises(UsageError, match=message):
        scenarios.load("kill9-mid-save", params)


def test_durations_take_seconds_minutes_and_hours():
    assert [duration_s(v) for v in (90, "90s", "45m", "1.5h", "m", "5d", -1)] == [90, 90, 2700, 5400, None, None, None]


def test_horizon_values():
    assert horizon.parse("50") == 50 and horizon.parse(7) == 7 and horizon.parse("end") is None
    for bad in ("0", "-3", "soon", 2.5, True):
        with pytest.raises(UsageError, match="--horizon"):
            horizon.parse(bad)


@pytest.mark.parametrize("args", [["-p", "after=soon"], ["-p", "save=0"], ["--horizon", "0"], ["--horizon", "never"]])
def test_bad_values_on_the_command_line_are_one_line_usage_errors(tmp_path, args):
    (tmp_path / "train.py").write_text("raise SystemExit('must not run')\n")
    res = run_chaosckpt(["run", "-s", "kill9-mid-save", *args, "train.py"], cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("chaosckpt: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "chaosckpt-results").exists()


def test_the_reference_stops_past_the_last_point_any_trial_needs():
    triggers = [scenarios.load("kill9-mid-save", p).trigger for p in ({"save": 2}, {"step": 300}, {"save": 2})]
    stop = horizon.reference_stop(50, [horizon.condition(t) for t in triggers])
    assert stop == {"steps": 50, "after": [{"save": 2}, {"step": 300}]}
    assert horizon.reference_stop(None, [{"save": 2}]) is None
    from_end = scenarios.load("kill9-mid-save", {"save": -1}).trigger
    assert horizon.reference_stop(50, [{"save": 2}, horizon.condition(from_end)]) is None


def test_the_agent_stops_steps_after_every_condition_is_met():
    h = Horizon({"steps": 5, "after": [{"save": 2}, {"step": 30}]}, started=0.0)
    h.saved(1, 10, began=1.0)
    h.saved(2, 20, began=2.0)
    assert h.stop_at is None and not h.due(1000)
    h.saved(3, 30, began=3.0)
    assert h.stop_at == 35 and not h.due(34) and h.due(35)
    h.saved(4, 40, began=4.0)
    assert h.stop_at == 35
    assert Horizon({"steps": 3}).due(3)
    timed = Horizon({"steps": 1, "after": [{"seconds": 60}]}, started=100.0)
    timed.saved(1, 10, began=150.0)
    timed.saved(2, 20, began=160.0)
    assert timed.stop_at == 21


def stopped_at(run: RunLog, steps: int) -> RunLog:
    proc = run.processes[0]
    proc.steps = proc.steps[:steps]
    proc.stopped = steps
    return run


def test_a_stopped_reference_covers_only_what_it_reached():
    ref = stopped_at(saves_at([100, 200, 300, 400]), 250)
    assert horizon.covers(ref, True, {"steps": 50, "after": [{"save": 2}]})
    assert not horizon.covers(ref, True, {"steps": 51, "after": [{"save": 2}]})
    assert not horizon.covers(ref, True, {"steps": 50, "after": [{"save": 3}]})
    assert not horizon.covers(ref, True, None)
    assert horizon.covers(ref, False, None)


def test_steps_cut_by_a_horizon_are_no_step_count_difference():
    ref = saves_at([10, 20, 30]).processes[0]
    resumed = ProcessLog(pid=2, steps=[dict(s) for s in ref.steps[10:15]])
    traj = compare.trajectory(ref, resumed, 10, 0.0)
    assert not traj.reproduced and [f.kind for f in traj.findings] == ["step-count-differs"]
    resumed.stopped = 5
    traj = compare.trajectory(ref, resumed, 10, 0.0)
    assert traj.reproduced and traj.compared == 5 and traj.findings == []
    short_ref = stopped_at(saves_at([10, 20, 30]), 12).processes[0]
    longer = ProcessLog(pid=3, steps=[dict(s) for s in ref.steps[10:20]])
    traj = compare.trajectory(short_ref, longer, 10, 0.0)
    assert traj.reproduced and traj.compared == 2


JOB = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 100001):
        opt.zero_grad()
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        if step % 10 == 0:
            torch.save(model.state_dict(), "ckpt.pt")
""")


@pytest.mark.e2e
@pytest.mark.parametrize("stop, steps", [({"steps": 5}, 5), ({"steps": 3, "after": [{"save": 2}]}, 23)])
def test_a_job_is_killed_at_its_horizon_and_the_run_is_marked_stopped(tmp_path, stop, steps):
    (tmp_path / "job.py").write_text(JOB)
    spec = RunSpec("reference", [sys.executable, "job.py"], tmp_path, tmp_path / "run", 120.0, stop=stop)
    result = launcher.launch(spec)
    assert result.stopped and not result.fault_fired and not result.timed_out and not result.survivors
    proc = RunLog.read(result.events_dir).trainer()
    assert proc.stopped == steps and len(proc.steps) == steps


@pytest.mark.e2e
def test_a_cached_reference_is_run_again_when_a_trial_needs_a_later_point(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    argv = [sys.executable, "job.py"]
    parts = cache.key_parts(argv, argv)
    key = cache.key(parts)

    def reference(save: int) -> bool:
        dest = tmp_path / f"ref-{save}"
        stop = {"steps": 2, "after": [{"save": save}]}
        cached = cache.reference_into(dest, key, parts, argv, work, 120.0, [], stop=stop)
        assert horizon.covers(RunLog.read(dest / "events"), True, stop)
        return cached

    assert reference(2) is False
    assert reference(1) is True  # an earlier point: the stopped run covers it
    assert reference(3) is False  # a later one: run again, and the entry replaced
    assert reference(2) is True
    (entry,) = [p for p in (work / cache.FOLDER / "references").iterdir() if not p.name.startswith(".")]
    assert json.loads((entry / cache.RUN_FILE).read_text())["stop"] == {"steps": 2, "after": [{"save": 3}]}
