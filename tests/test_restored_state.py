"""Why a resume diverged, from what the processes held: the agent's manifest of the training state, the
conductor's naming of each part a resume did not restore (the shapes of tests/jobs/state_job.py, built in
process), what a checkpoint lacks of that state, and the older file a resume chose."""

from __future__ import annotations

import copy

import torch
from torch import nn

from chaosckpt.agent import held, manifest
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import compare, older_choice, restored_state, verdict
from chaosckpt.conductor.trial.faulted import Faulted


def _job(steps: int):
    """A model with batch norm, Adam and a cosine schedule, trained ``steps`` steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=16)
    for _ in range(steps):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model, opt, sched


def _state(model, opt) -> dict:
    return manifest.take([opt], [model], [])


def _log(state: dict, start: int = 0, loss: float = 1.0) -> ProcessLog:
    steps = [{"step": i + 1, "loss": [loss], "pfp": "p"} for i in range(start + 2)]
    steps[start]["state"] = state
    return ProcessLog(pid=1, steps=steps)


def test_the_manifest_finds_the_scheduler_through_the_optimizer_not_by_name():
    model, opt, sched = _job(3)
    state = _state(model, opt)
    assert state["optimizer 0"]["class"] == "Adam" and state["optimizer 0"]["with_state"] == 6
    assert state["scheduler 0.0"]["class"] == "CosineAnnealingLR"
    assert state["scheduler 0.0"]["values"]["last_epoch"] == 3
    assert set(state["buffers Sequential"]["buffers"]) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}


def test_the_holders_found_are_kept_until_what_refers_to_the_optimizer_changes(monkeypatch):
    model, opt, sched = _job(1)
    walks = []
    walk = manifest._walk_holders
    monkeypatch.setattr(manifest, "_walk_holders", lambda o: walks.append(1) or walk(o))
    assert manifest.holders_of(opt) == [sched] and manifest.holders_of(opt) == [sched] and len(walks) == 1
    warmup = torch.optim.lr_scheduler.LinearLR(opt)  # one more reference to the optimizer: walked again
    assert manifest.holders_of(opt) == [sched, warmup] and len(walks) == 2
    del warmup
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)  # made anew in the old one's place: the count is as before
    assert [type(h).__name__ for h in manifest.holders_of(opt)] == ["StepLR"] and len(walks) == 3


def test_objects_that_hold_the_optimizer_but_keep_no_state_of_their_own_are_never_asked_for_one():
    model, opt, _ = _job(1)
    asked = []

    class Wrapper(nn.Module):  # a module's state_dict may gather across ranks: never called
        def __init__(self) -> None:
            super().__init__()
            self.optimizer = opt

        def state_dict(self, *args, **kwargs):
            asked.append("module")
            return {}

    class Holder:  # no load_state_dict: not a state the job restores
        def __init__(self) -> None:
            self.optimizer = opt

        def state_dict(self):
            asked.append("holder")
            return {}

    kept = [Wrapper(), Holder()]
    state = _state(model, opt)
    assert asked == [] and len(kept) == 2
    assert [k for k in state if k.startswith("scheduler")] == ["scheduler 0.0"]


def test_a_resume_that_restored_everything_differs_in_nothing():
    model, opt, sched = _job(4)
    reference = _state(model, opt)
    resumed_model, resumed_opt, resumed_sched = _job(0)
    resumed_model.load_state_dict(model.state_dict())
    resumed_opt.load_state_dict(opt.state_dict())
    resumed_sched.load_state_dict(sched.state_dict())
    assert restored_state.findings(_log(reference, 4), _log(_state(resumed_model, resumed_opt)), 4) == []


def test_each_part_left_out_is_named_with_its_values():
    model, opt, sched = _job(4)
    reference = _state(model, opt)
    resumed_model, resumed_opt, _ = _job(0)
    resumed_model.load_state_dict({k: v for k, v in model.state_dict().items() if "running" not in k}, strict=False)
    found = {f.kind: f for f in restored_state.findings(_log(reference, 4), _log(_state(resumed_model, resumed_opt)), 4)}
    assert set(found) == {"optimizer-not-restored", "scheduler-not-restored", "buffers-not-restored"}
    assert "holds state for none of its 6 parameters, where the uninterrupted run's holds it for 6" in \
        found["optimizer-not-restored"].message
    assert "at step 5 last_epoch 0, the uninterrupted run's 4" in found["scheduler-not-restored"].message
    assert found["buffers-not-restored"].details["buffers"] == ["1.running_mean", "1.running_var"]
    assert "None" not in " ".join(f.message for f in found.values())


def test_a_state_that_differs_is_a_divergence_even_when_every_loss_matches():
    model, opt, _ = _job(4)
    reference = _state(model, opt)
    resumed = copy.deepcopy(reference)
    resumed["buffers Sequential"]["buffers"]["1.running_mean"] = "00000000"
    traj = compare.trajectory(_log(reference, 4), _log(resumed, 0), 4, 0.0)
    assert not traj.reproduced and traj.first_divergent_step == 5
    assert [f.kind for f in traj.findings] == ["buffers-not-restored"]
    same = compare.trajectory(_log(reference, 4), _log(copy.deepcopy(reference), 0), 4, 0.0)
    assert same.reproduced and same.findings == []


def test_buffers_are_not_compared_when_the_modules_trained_in_another_mode():
    model, opt, _ = _job(4)
    reference = _state(model, opt)
    resumed = copy.deepcopy(reference)
    resumed["buffers Sequential"]["buffers"]["1.running_mean"] = "00000000"
    assert restored_state.findings(_log(reference, 4), _log(resumed), 4, modes_differ=True) == []


def test_a_manifest_the_job_forged_in_its_events_file_is_read_without_failing():
    model, opt, _ = _job(2)
    reference = _state(model, opt)
    for forged in ([1, 2], {"optimizer 0": "x"}, {"optimizer 0": {"groups": "x", "with_state": []}},
                   {"buffers m": {"buffers": 3}}, {"scheduler 0.0": {"values": [1]}}, "state"):
        log = _log(reference, 2)
        found = restored_state.findings(log, _log(forged), 2)
        assert all(f.kind.endswith("-not-restored") for f in found)


def _held(*objs, model, opt) -> list:
    found = held.Held(held.wanted([opt], [model], []))
    for obj in objs:
        found.add(obj)
    return [w.what for w in found.lacking()]


def test_a_checkpoint_that_holds_the_whole_state_lacks_nothing_whatever_its_keys_are_called():
    model, opt, sched = _job(3)
    assert _held({"m": model.state_dict(), "o": opt.state_dict(), "s": sched.state_dict()}, model=model, opt=opt) == []
    flat = {f"optim.{i}.{k}": v for i, s in opt.state_dict()["state"].items() for k, v in s.items()}
    assert _held(model.state_dict(), [flat, {"schedule": dict(sched.state_dict())}], model=model, opt=opt) == []


def test_a_checkpoint_names_each_part_it_does_not_hold():
    model, opt, sched = _job(3)
    assert _held({"model": dict(model.named_parameters())}, model=model, opt=opt) == [
        "the optimizer Adam", "the LR scheduler CosineAnnealingLR", "the buffers of Sequential"]
    ema = copy.deepcopy(model).half()  # a module pickled whole holds its buffers, in its own dtype
    assert "the buffers of Sequential" in _held({"ema": ema}, model=model, opt=opt)
    assert "the buffers of Sequential" not in _held({"model": copy.deepcopy(model)}, model=model, opt=opt)


def test_a_part_the_checkpoint_lacks_is_an_error_where_the_resume_paid_for_it_and_a_note_where_it_did_not():
    lacks = Finding("checkpoint-lacks-state", "the checkpoint does not hold the optimizer opt (Adam)",
                    {"parts": ["opt (Adam)"]})
    paid = Finding("optimizer-not-restored", "the optimizer opt (Adam) was not restored", {"part": "opt (Adam)"})
    assert [f.severity for f in verdict.settle([lacks, paid], (), reproduced=False)] == ["error", "warning"]
    assert verdict.settle([lacks], (), reproduced=False)[0].severity == "warning"
    (note,) = verdict.settle([lacks], (), reproduced=True)
    assert note.severity == "note" and "yet the resumed run reproduced" in note.message and "opt (Adam)" in note.message


def _save(index: int, step: int, *files: str) -> Save:
    return Save(index=index, step=step, path=files[0], digest=f"d{step}", ts=float(step), ok=True,
                files=[{"path": f} for f in files])


def test_an_older_resume_names_the_file_it_loaded_and_the_newer_complete_one_it_passed_over(tmp_path):
    work = tmp_path / "sandbox"
    last, epoch = str(work / "ckpt" / "last.ckpt"), str(work / "ckpt" / "epoch=1-step=8.ckpt")
    run = Faulted(result=None, log=RunLog([]), proc=ProcessLog(pid=1), step=10, fault=None,
                  completed=[_save(1, 4, str(work / "ckpt" / "epoch=0-step=4.ckpt"), last), _save(2, 8, epoch)])
    resume = RunLog([ProcessLog(pid=2, loads=[{"path": last, "ok": True, "ts": 1.0}],
                                steps=[{"step": 1, "ts": 2.0, "loss": [1.0]}])])
    (found,) = older_choice.passed_over(run, resume, 4, work)
    assert found.kind == "resume-chose-older"
    assert (found.details["loaded"], found.details["newest"]) == ("ckpt/last.ckpt", ["ckpt/epoch=1-step=8.ckpt"])
    assert "loaded ckpt/last.ckpt, the checkpoint of step 4, while the checkpoint of step 8" in found.message
    assert older_choice.passed_over(run, resume, 8, work) == []  # not older: nothing passed over
    took_newest = RunLog([ProcessLog(pid=2, loads=[{"path": epoch, "ok": True, "ts": 1.0}],
                                     steps=[{"step": 1, "ts": 2.0, "loss": [1.0]}])])
    assert older_choice.passed_over(run, took_newest, 4, work) == []  # its own file held an older state


def test_a_resume_that_took_other_tensors_from_a_checkpoint_is_placed_at_that_checkpoint_by_its_file(tmp_path):
    """The EMA copy of the checkpoint of step 8, loaded from the name its temporary file was renamed to: the resume
    started from step 8's checkpoint, whatever tensors it took from it; a file no complete save holds places it
    nowhere."""
    ckpt = tmp_path / "ckpt"
    tmp, last = str(ckpt / "last.pt.tmp"), str(ckpt / "last.pt")
    saves = [_save(1, 4, tmp), _save(2, 8, tmp)]
    for save in saves:
        save.moves = [{"how": "rename", "src": tmp, "dst": last, "ok": True, "copied": False}]
    run = Faulted(result=None, log=RunLog([]), proc=ProcessLog(pid=1), step=12, fault=None, completed=saves)

    def resumed(path: str) -> RunLog:
        return RunLog([ProcessLog(pid=2, loads=[{"path": path, "ok": True, "ts": 1.0}],
                                  steps=[{"step": 1, "ts": 2.0, "loss": [1.0]}])])

    assert older_choice.step_loaded(run, resumed(last)) == 8
    assert older_choice.step_loaded(run, resumed(str(ckpt / "other.pt"))) is None
    assert compare.placed(8, 8).outcome == "last-good" and compare.placed(4, 8).outcome == "older"
    assert compare.placed(0, 8).outcome == "scratch"


def test_a_load_through_a_file_object_names_the_file_it_reads(tmp_path):
    from io import BytesIO

    from chaosckpt.agent.interpose import _file_name

    path = tmp_path / "last.ckpt"
    path.write_bytes(b"x")

    class Opener:  # fsspec's LocalFileOpener: the path it opened, and the open file inside it
        def __init__(self) -> None:
            self.path = str(path)
            self.f = open(path, "rb")

    with open(path, "rb") as plain_file:
        assert _file_name(plain_file) == str(path)
    opener = Opener()
    try:
        assert _file_name(opener) == str(path)
    finally:
        opener.f.close()
    assert _file_name(BytesIO(b"x")) is None
