"""A checkpoint is every save call between two steps: the agent's events, counts and fault placement for one."""

from __future__ import annotations

import os

import pytest
import torch

from chaosckpt import protocol
from chaosckpt.agent.faults import ArmedFault
from chaosckpt.agent.interpose import CountingWriter
from chaosckpt.agent.recorder import Recorder
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming
from chaosckpt.conductor.runs.runlog import _process


class Events:
    """An event writer that keeps the events in memory."""

    def __init__(self):
        self.events = []

    def emit(self, kind, **fields):
        self.events.append({"t": kind, "ts": float(len(self.events)), "pid": 1, **fields})

    def kinds(self):
        return [e["t"] for e in self.events]


def _job(fault=None):
    events = Events()
    rec = Recorder(events, None, ArmedFault.from_json(protocol.encode_fault(fault)) if fault else None)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec.optimizer_created(opt)
    return events, rec, model, opt


def _step(rec, opt):
    rec.on_step(opt)
    rec.on_step_end(opt)


def _save(rec, obj, path):
    with rec.recording_save(path, "path", obj) as save:
        with open(path, "wb") as raw:
            save.writer = CountingWriter(raw, rec, save.checkpoint, path)
            torch.save(obj, save.writer)


def _trainer_checkpoint(rec, model, opt, folder):
    """The files a Trainer writes per checkpoint, in its order."""
    os.makedirs(folder, exist_ok=True)
    _save(rec, model.state_dict(), os.path.join(folder, "model.pt"))
    _save(rec, opt.state_dict(), os.path.join(folder, "optimizer.pt"))
    _save(rec, {"python": (1, 2), "cpu": torch.get_rng_state()}, os.path.join(folder, "rng_state.pth"))


def test_the_save_calls_between_two_steps_are_one_checkpoint(tmp_path):
    events, rec, model, opt = _job()
    for n in (1, 2):
        _step(rec, opt)
        _trainer_checkpoint(rec, model, opt, tmp_path / f"checkpoint-{n}")
    _step(rec, opt)
    assert events.kinds().count("save-begin") == 2
    assert events.kinds().count("save-file") == 6
    log = _process(events.events)
    assert [s.index for s in log.saves] == [1, 2]
    assert [s.step for s in log.saves] == [1, 2]
    first = log.saves[0]
    sizes = [os.path.getsize(tmp_path / "checkpoint-1" / n) for n in ("model.pt", "optimizer.pt", "rng_state.pth")]
    assert first.ok and first.bytes == sum(sizes)
    assert [os.path.basename(f["path"]) for f in first.files] == ["model.pt", "optimizer.pt", "rng_state.pth"]


def test_a_checkpoint_not_ended_by_a_step_ends_at_exit(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    _trainer_checkpoint(rec, model, opt, tmp_path / "checkpoint-1")
    assert "save-end" not in events.kinds()
    rec.at_exit()
    assert events.kinds()[-2:] == ["save-end", "exit"]


def test_enospc_lands_at_a_fraction_of_the_whole_checkpoint(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    _trainer_checkpoint(rec, model, opt, tmp_path / "reference")
    _step(rec, opt)
    reference = _process(events.events)
    model_bytes = reference.saves[0].files[0]["bytes"]
    at = model_bytes + 10  # inside the second file
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 1, at_byte=at))
    _step(rec, opt)
    with pytest.raises(OSError):
        _trainer_checkpoint(rec, model, opt, tmp_path / "checkpoint-1")
    fault = next(e for e in events.events if e["t"] == "fault")
    assert os.path.basename(fault["path"]) == "optimizer.pt"
    assert fault["bytes"] == at
    assert os.path.getsize(tmp_path / "checkpoint-1" / "optimizer.pt") < reference.saves[0].files[1]["bytes"]
    assert not (tmp_path / "checkpoint-1" / "rng_state.pth").exists()


def test_a_fault_in_one_named_file_counts_that_file_s_bytes(tmp_path):
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 2, at_byte=5, file="rng_state.pth"))
    _step(rec, opt)
    _trainer_checkpoint(rec, model, opt, tmp_path / "checkpoint-1")
    _step(rec, opt)
    with pytest.raises(OSError):
        _trainer_checkpoint(rec, model, opt, tmp_path / "checkpoint-2")
    assert os.path.getsize(tmp_path / "checkpoint-2" / "rng_state.pth") < os.path.getsize(
        tmp_path / "checkpoint-1" / "rng_state.pth")
    assert os.path.getsize(tmp_path / "checkpoint-2" / "model.pt") == os.path.getsize(tmp_path / "checkpoint-1" / "model.pt")
    rec.at_exit()
    log = _process(events.events)
    assert [s.ok for s in log.saves] == [True, False]


def test_rng_and_step_findings_read_every_file_of_the_checkpoint(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    torch.rand(1)
    _step(rec, opt)
    _trainer_checkpoint(rec, model, opt, tmp_path / "checkpoint-2")
    _step(rec, opt)
    kinds = [c["kind"] for c in _process(events.events).saves[0].content]
    assert "rng-states-missing" not in kinds  # rng_state.pth holds the torch stream the loop draws from
    events, rec, model, opt = _job()
    _step(rec, opt)
    torch.rand(1)
    _step(rec, opt)
    _save(rec, model.state_dict(), str(tmp_path / "model.pt"))
    _save(rec, opt.state_dict(), str(tmp_path / "optimizer.pt"))
    _step(rec, opt)
    kinds = [c["kind"] for c in _process(events.events).saves[0].content]
    assert "rng-states-missing" in kinds


def test_checkpoint_locations_collapse_numbered_folders():
    assert arming.location("/w/out/checkpoint-8/optimizer.pt") == "/w/out"
    assert arming.location("/w/out/checkpoint_2/random_states_0.pkl") == "/w/out"
    assert arming.location("/w/ckpt/last.pt") == "/w/ckpt"
    assert arming.location("/w/ckpt/dcp") == "/w/ckpt"
    assert arming.location("/w/ckpt/node1/rank1-epoch0.pt") == "/w/ckpt/node1"  # a node's own folder, not numbered


def test_file_param_places_the_fault_in_that_file_of_the_reference_checkpoint(tmp_path):
    from chaosckpt.conductor import scenario as scenario_mod
    from chaosckpt.conductor.runs.runlog import RunLog

    events, rec, model, opt = _job()
    for n in (1, 2):
        _step(rec, opt)
        _trainer_checkpoint(rec, model, opt, tmp_path / f"checkpoint-{n}")
    _step(rec, opt)
    reference = RunLog([_process(events.events)])
    kill = scenario_mod.load("kill9-mid-save", {"file": "optimizer.pt"})
    fault, _ = kill.kind.arm(kill.trigger, reference, Arming(tmp_path))
    size = reference.processes[0].saves[1].files[1]["bytes"]
    assert fault["file"] == "optimizer.pt" and fault["at_byte"] == size // 2 and fault["save"] == 2
    with pytest.raises(arming.NotArmable, match="writes no file of that name"):
        nope = scenario_mod.load("kill9-mid-save", {"file": "nope.pt"})
        nope.kind.arm(nope.trigger, reference, Arming(tmp_path))


def test_a_step_counter_in_json_beside_the_checkpoint_files_counts(tmp_path):
    """A Trainer keeps global_step in trainer_state.json, written last into the checkpoint's folder."""
    import json

    def checkpoint(with_json):
        events, rec, model, opt = _job()
        _step(rec, opt)
        folder = tmp_path / f"checkpoint-{int(with_json)}"
        _trainer_checkpoint(rec, model, opt, folder)
        if with_json:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))
        _step(rec, opt)
        return [c["kind"] for c in _process(events.events).saves[0].content]

    assert "no-step-in-checkpoint" in checkpoint(with_json=False)
    assert "no-step-in-checkpoint" not in checkpoint(with_json=True)


def _saved(index, step, files, path=None, via="path"):
    from chaosckpt.conductor.runs.runlog import Save

    paths = [str(f) for f in files]
    return Save(index=index, step=step, path=path or paths[0], digest="d", ts=float(index), ok=True,
                files=[{"path": p, "via": via, "ok": True, "bytes": 1, "writes": 1} for p in paths])


def test_a_complete_checkpoint_whose_folder_the_job_deleted_is_gone_and_named_as_rotation(tmp_path):
    from chaosckpt.conductor.disk import checkpoints

    old = _saved(1, 4, [tmp_path / "checkpoint_0" / "model.bin", tmp_path / "checkpoint_0" / "optimizer.bin"])
    new = _saved(2, 8, [tmp_path / "checkpoint_1" / "model.bin"])
    (tmp_path / "checkpoint_1").mkdir()
    assert checkpoints.folder(old) == str(tmp_path / "checkpoint_0")
    assert checkpoints.gone([old]) == [old]  # checkpoint_0 was deleted
    finding = checkpoints.rotation_finding([old], [old], new, str)
    assert finding.kind == "rotation-before-complete" and finding.details["deleted_step"] == 4
    (tmp_path / "checkpoint_0").mkdir()
    assert checkpoints.gone([old]) == [] and checkpoints.rotation_finding([old], [], new, str) is None


def test_a_step_named_file_renamed_into_a_shared_folder_is_gone_once_deleted_and_named_by_its_final_name(tmp_path):
    from chaosckpt.conductor.disk import checkpoints

    tmp, final = tmp_path / "step_8.pt.tmp", tmp_path / "step_8.pt"
    old = _saved(1, 8, [tmp])
    old.moves = [{"src": str(tmp), "dst": str(final), "ok": True, "how": "move"}]
    new = _saved(2, 16, [tmp_path / "step_16.pt.tmp"])
    final.write_bytes(b"x")
    assert checkpoints.folder(old) is None and checkpoints.files(old) == [str(final)]
    assert checkpoints.gone([old]) == []
    final.unlink()
    assert checkpoints.gone([old]) == [old]
    finding = checkpoints.rotation_finding([old], [old], new, str)
    assert finding.details["path"] == str(final)
    assert finding.message.startswith(f"the job deleted {final} (step 8), its newest complete checkpoint, while "
                                      "checkpoint 2 was not yet complete; no complete checkpoint was left: delete the "
                                      "old file only after the new one is complete and in place")


def test_a_resume_that_read_the_torn_newest_file_last_chose_it_and_one_that_fell_back_did_not(tmp_path):
    from chaosckpt.conductor.disk import checkpoints
    from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save

    old, torn = str(tmp_path / "step_8.pt"), str(tmp_path / "step_16.pt")
    complete = _saved(1, 8, [old])
    interrupted = Save(index=2, step=16, path=None, digest="d", ts=2.0)  # written from memory: no file returned

    def resume(*paths):
        return RunLog([ProcessLog(pid=1, loads=[{"path": p, "ok": p == old} for p in paths])])

    took = checkpoints.chose_incomplete(interrupted, [complete], [], resume(torn), None, str, [torn])
    assert (took.kind, took.details) == ("resume-chose-incomplete", {"path": torn, "complete_step": 8})
    assert f"while {old} (step 8) was complete: resume from the newest file that loads" in took.message
    assert checkpoints.chose_incomplete(interrupted, [complete], [], resume(torn, old), None, str, [torn]) is None
    assert checkpoints.chose_incomplete(interrupted, [complete], [], resume(torn), None, str, []) is None
    assert checkpoints.chose_incomplete(interrupted, [complete], [], resume(old), None, str, [old]) is None  # in place


def test_a_dcp_folder_is_its_own_checkpoint_folder(tmp_path):
    from chaosckpt.conductor.disk import checkpoints

    save = _saved(2, 8, [], path=str(tmp_path / "ckpt" / "step_8"), via="dcp")
    save.files = [{"path": save.path, "via": "dcp", "ok": True, "bytes": 9, "writes": 3}]
    assert checkpoints.folder(save) == str(tmp_path / "ckpt" / "step_8")


def test_a_whole_training_state_finished_inside_an_interrupted_checkpoint_is_good(tmp_path):
    from chaosckpt.conductor.disk import checkpoints

    save = _saved(1, 4, [tmp_path / "epoch=0-step=4.ckpt"])
    save.ok = None  # the fault struck inside it: it never ended
    assert checkpoints.good_part(save) == []
    save.files[0]["whole"] = True
    assert checkpoints.good_part(save) == [save]
    save.ok = True  # a checkpoint that ended is complete as it is, never a part
    assert checkpoints.good_part(save) == []


def test_the_good_part_of_an_interrupted_checkpoint_leaves_out_the_file_the_fault_cut(tmp_path):
    """A full disk failed the write of ``current.pt`` after ``step_16.pt`` was finished: the good part is
    ``step_16.pt`` alone, so ``current.pt`` is neither a file of the last good checkpoint (an in-place save over it
    held step 8's) nor out of reach of the resume's choice of an incomplete file."""
    from chaosckpt.conductor.disk import checkpoints

    step16, current = str(tmp_path / "step_16.pt"), str(tmp_path / "current.pt")
    save = _saved(2, 16, [step16, current])
    save.ok = False
    save.files[0]["whole"] = save.files[1]["whole"] = True
    save.files[1]["ok"] = False
    (part,) = checkpoints.good_part(save)
    assert checkpoints.files(part) == [step16] and checkpoints.files(save) == [step16, current]


def test_the_agent_marks_a_file_holding_model_and_optimizer_as_whole(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    _save(rec, {"state_dict": model.state_dict(), "optimizer_states": [opt.state_dict()], "global_step": 1},
          str(tmp_path / "epoch=0-step=1.ckpt"))
    _save(rec, opt.state_dict(), str(tmp_path / "optimizer.pt"))
    _step(rec, opt)
    assert [f.get("whole", False) for f in _process(events.events).saves[0].files] == [True, False]


def test_a_step_on_another_thread_closing_the_checkpoint_as_it_opens_leaves_the_save_whole(tmp_path):
    """A save on a background thread: the main thread's next step closes the new checkpoint while its first save
    call is still being opened; the save goes on into the file and is recorded, nothing is raised into the job."""
    events, rec, model, opt = _job()
    _step(rec, opt)

    def emit(kind, **fields):
        Events.emit(events, kind, **fields)
        if kind == "save-begin":
            _step(rec, opt)

    events.emit = emit
    path = str(tmp_path / "last.pt")
    _save(rec, model.state_dict(), path)
    assert torch.load(path)["weight"].shape == (1, 4)
    assert events.kinds().count("save-begin") == 1
    saved = [e for e in events.events if e["t"] == "save-file"]
    assert [(e["save"], e["path"], e["bytes"]) for e in saved] == [(1, path, os.path.getsize(path))]


def test_file_param_places_the_fault_in_a_file_a_dcp_save_wrote_in_its_folder(tmp_path):
    # measured on tests/jobs/dcp_job.py: rank 0's save-file names the folder ckpt/step_8 (29,761 bytes in 13
    # writes); .metadata.tmp, written last and renamed to .metadata, took 8,725 bytes in one write
    from chaosckpt.conductor import scenario as scenario_mod
    from chaosckpt.conductor.runs.runlog import RunLog

    events = [{"t": "hello", "pid": 8, "ts": 0.0, "cwd": "/w"}]
    for n in (1, 2):
        folder = f"/w/ckpt/step_{4 * n}"
        events += [
            {"t": "step", "pid": 8, "ts": 10.0 * n, "step": 4 * n},
            {"t": "save-begin", "pid": 8, "ts": 10.0 * n + 1, "save": n, "step": 4 * n, "path": folder, "via": "dcp",
             "digest": f"d{n}"},
            {"t": "save-file", "pid": 8, "ts": 10.0 * n + 2, "save": n, "path": folder, "via": "dcp", "ok": True,
             "bytes": 29761, "writes": 13, "parts": [{"name": "__0_0.distcp", "bytes": 21036, "writes": 12},
                                                     {"name": ".metadata.tmp", "bytes": 8725, "writes": 1}]},
            {"t": "save-end", "pid": 8, "ts": 10.0 * n + 3, "save": n, "ok": True, "bytes": 29761, "writes": 13}]
    events.append({"t": "step", "pid": 8, "ts": 30.0, "step": 9})
    reference = RunLog([_process(events)])
    kill = scenario_mod.load("kill9-mid-save", {"file": ".metadata.tmp", "fraction": 0.5})
    fault, _ = kill.kind.arm(kill.trigger, reference, Arming(tmp_path))
    assert (fault["file"], fault["at_byte"], fault["save"]) == (".metadata.tmp", 4362, 2)
    assert arming.file_bytes(reference, 2) == {"ckpt/step_8": 29761, "ckpt/step_8/__0_0.distcp": 21036,
                                               "ckpt/step_8/.metadata.tmp": 8725}
    with pytest.raises(arming.NotArmable, match=r"\(it writes .metadata.tmp, __0_0.distcp\)"):
        nope = scenario_mod.load("kill9-mid-save", {"file": ".metadata"})
        nope.kind.arm(nope.trigger, reference, Arming(tmp_path))
