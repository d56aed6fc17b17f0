"""Resumed steps lined up with the uninterrupted run's by the batches they trained on, and the resume judged from
the state its load restored: hand-made event logs."""

from __future__ import annotations

from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import alignment, compare, restore_point

EPOCH = 12
EPOCHS = 3


def batch(epoch, position):
    return f"e{epoch}b{position}"


def step(n, loss, the_batch=None, digest=None):
    e = {"step": n, "ts": float(n), "loss": [loss], "pfp": f"p{loss}", "psum": loss, "rng": {"torch": "t"}}
    if the_batch is not None:
        e["batch"] = the_batch
    if digest is not None:
        e["digest"] = digest
    return e


def passes(epochs, first_step=0):
    return [{"t": "sampler", "sampler": "RandomSampler", "size": 96, "n": 96, "epoch": None,
             "step": first_step + e * EPOCH} for e in range(epochs)]


def reference():
    """3 epochs of 12 batches, a save every 5 steps."""
    steps = [step(g + 1, float(g + 1), batch(g // EPOCH, g % EPOCH), "d0" if g == 0 else None)
             for g in range(EPOCH * EPOCHS)]
    log = ProcessLog(pid=1, steps=steps, passes=passes(EPOCHS))
    for i, at in enumerate(range(5, EPOCH * EPOCHS + 1, 5), 1):
        log.saves.append(Save(index=i, step=at, path="/w/last.pt", digest=f"d{at}", ts=float(i), ok=True))
    return log


def resumed_on(batches, digest="d5"):
    """A resumed process whose steps trained on ``batches``, with losses no reference step has."""
    steps = [step(i + 1, 100.0 + i, b) for i, b in enumerate(batches)]
    steps[0]["digest"] = digest
    return ProcessLog(pid=2, steps=steps)


def next_epoch_after(start):
    """The batches of a resume that starts the epoch after the one step ``start`` was in."""
    return [batch(e, p) for e in range(start // EPOCH + 1, EPOCHS) for p in range(EPOCH)]


def test_a_resume_that_starts_the_next_epoch_skipped_the_rest_of_the_saved_one():
    found = alignment.shift(reference().steps, resumed_on(next_epoch_after(5)).steps, 5)
    assert (found.skipped, found.steps) == (True, (6, 12))


def test_a_resume_that_restarts_the_epoch_replayed_the_steps_the_checkpoint_holds():
    again = [batch(e, p) for e in range(0, EPOCHS) for p in range(EPOCH)]
    found = alignment.shift(reference().steps, resumed_on(again).steps, 5)
    assert (found.skipped, found.steps) == (False, (1, 5))


def test_a_resume_on_the_batches_after_its_checkpoint_is_not_shifted():
    ref = reference()
    assert alignment.shift(ref.steps, resumed_on([s["batch"] for s in ref.steps[5:]]).steps, 5) is None
    assert alignment.shift(ref.steps, resumed_on(["unseen"] * 31).steps, 5) is None  # batches it never trained on
    unrecorded = resumed_on(next_epoch_after(5))
    for s in unrecorded.steps:
        del s["batch"]
    assert alignment.shift(ref.steps, unrecorded.steps, 5) is None  # no DataLoader: nothing to line up by


def test_among_recurring_batches_the_count_of_steps_then_the_nearest_position_decides():
    ref = reference()
    for s in ref.steps:  # the same order every epoch: each batch recurs once per epoch
        s["batch"] = f"b{(s['step'] - 1) % EPOCH}"
    skipping = resumed_on([f"b{p}" for p in range(EPOCH)] * 2)  # 24 steps: as many as the reference after step 12
    assert alignment.shift(ref.steps, skipping.steps, 5).aligned == 12
    replaying = resumed_on([f"b{p}" for p in range(EPOCH)] * 3)  # 36 steps: after step 0
    assert alignment.shift(ref.steps, replaying.steps, 5).aligned == 0
    cut = resumed_on([f"b{p}" for p in range(4)])  # a horizon stopped it: the nearest epoch start, step 0
    assert alignment.shift(ref.steps, cut.steps, 5).aligned == 0


def test_the_finding_names_the_skipped_steps_where_the_checkpoint_stood_and_the_fix():
    finding = alignment.finding(reference(), resumed_on(next_epoch_after(5)), 5)
    assert finding.kind == "steps-skipped"
    assert finding.details == {"first_step": 6, "last_step": 12, "checkpoint_step": 5, "batch_of_step": 13}
    assert "skipped steps 6-12" in finding.message and "5 steps into a DataLoader pass" in finding.message
    assert "began the next pass" in finding.message and "position in the epoch" in finding.message
    replayed = alignment.finding(reference(), resumed_on([batch(0, p) for p in range(EPOCH)]), 5)
    assert replayed.kind == "steps-replayed" and "steps 1-5" in replayed.message
    assert "began that pass again" in replayed.message


def test_a_checkpoint_at_a_pass_boundary_is_left_to_the_pass_order_check():
    ref = reference()
    ref.saves.append(Save(index=9, step=12, path="/w/last.pt", digest="d12", ts=9.0, ok=True))
    two_ahead = [batch(2, p) for p in range(EPOCH)]
    assert alignment.shift(ref.steps, resumed_on(two_ahead).steps, 12) is not None
    assert alignment.finding(ref, resumed_on(two_ahead), 12) is None


def test_an_evaluation_loader_s_passes_are_not_the_training_passes():
    ref = reference()
    ref.passes += [{"t": "sampler", "sampler": "SequentialSampler", "size": 16, "n": 16, "step": s}
                   for s in (5, 10)]
    assert {e["sampler"] for e in alignment.training_passes(ref)} == {"RandomSampler"}
    assert alignment.finding(ref, resumed_on(next_epoch_after(5)), 5).kind == "steps-skipped"


def test_the_random_streams_are_compared_where_the_resume_s_first_batch_was_trained():
    ref = reference()
    for s in ref.steps:
        s["rng"] = {"torch": f"t{s['step']}"}
    resume = resumed_on(next_epoch_after(5))
    resume.steps[0]["rng"] = {"torch": "t13"}  # as at the uninterrupted run's step 13, not its step 6
    traj = compare.trajectory(ref, resume, 5, 0.0)
    assert not traj.reproduced and traj.first_divergent_step == 6
    assert [f.kind for f in traj.findings] == ["steps-skipped"]
    resume.steps[0]["rng"] = {"torch": "t6"}  # restored as at the checkpoint's step: the skip alone explains it
    assert [f.kind for f in compare.trajectory(ref, resume, 5, 0.0).findings] == ["steps-skipped"]
    resume.steps[0]["rng"] = {"torch": "elsewhere"}
    skipped, stream = compare.trajectory(ref, resume, 5, 0.0).findings
    assert (skipped.kind, stream.kind, stream.details["step"]) == ("steps-skipped", "rng-not-restored", 13)
    for s in resume.steps:
        s["eval"] = ["model"]
    assert [f.kind for f in compare.trajectory(ref, resume, 5, 0.0).findings][:2] == [
        "steps-skipped", "eval-mode-in-training"]  # the skip leads, whatever mode the modules trained in


def test_a_resume_that_began_inside_another_pass_is_left_to_the_random_streams():
    """Its position in the epoch was kept, but its pass drew another epoch's order (a generator not restored)."""
    ref = reference()
    mid_pass = [batch(0, p) for p in range(5, EPOCH)] + [batch(1, p) for p in range(EPOCH)]
    assert alignment.shift(ref.steps, resumed_on(mid_pass).steps, 12 + 5) is not None
    assert alignment.finding(ref, resumed_on(mid_pass), 12 + 5) is None


def preloaded(digests=("d0", "d10"), pre=1):
    """A resumed process that took ``pre`` steps (digest of the initial model) before loading the step-10 save."""
    steps = [step(i + 1, 0.0) for i in range(pre)] + [step(pre + i + 1, float(11 + i)) for i in range(26)]
    steps[0]["digest"], steps[pre]["digest"] = digests
    passes_ = [{"t": "sampler", "step": pre + s, "n": 96} for s in (2, 14)]
    saves = [Save(index=1, step=pre + 5, path="/w/last.pt", digest="x", ts=1.0, ok=True)]
    return ProcessLog(pid=3, steps=steps, passes=passes_, saves=saves, stopped=pre + 20)


def test_steps_before_the_load_are_not_the_resume_s():
    table = compare.digest_table(reference())
    proc = preloaded()
    assert restore_point.restore_index(proc, table) == 1
    log, before = restore_point.after_restore(RunLog([proc]), table)
    assert before == 1
    moved = log.trainer()
    assert moved.first_digest() == "d10" and len(moved.steps) == 26
    assert [p["step"] for p in moved.passes] == [2, 14] and moved.saves[0].step == 5 and moved.stopped == 20
    rec = compare.recovery(log, 0, "", 10, table)
    assert (rec.outcome, rec.recovered_step) == ("last-good", 10)
    assert compare.recovery(RunLog([preloaded()]), 0, "", 10, table).outcome == "scratch"  # as it read before


def test_a_resume_that_loaded_nothing_saved_keeps_its_first_step():
    table = compare.digest_table(reference())
    assert restore_point.restore_index(preloaded(("d5", "d10")), table) == 0  # it started from a save already
    assert restore_point.restore_index(preloaded(("d0", "unknown")), table) == 0  # its load restored no saved state
    log = RunLog([preloaded(("d0", "unknown"))])
    assert restore_point.after_restore(log, table) == (log, 0)


def test_the_note_counts_the_steps_before_the_load():
    assert "took 1 optimizer step before" in restore_point.before_load(1).message
    assert "took 3 optimizer steps before" in restore_point.before_load(3).message
    assert restore_point.before_load(3).details == {"steps": 3}


def test_without_a_dataloader_the_steps_are_lined_up_by_what_the_model_consumed():
    """A loop that slices a tensor with a counter (counter_job.py) has no dataset indices, only the fingerprint of
    its model's input: a resume whose counter restarted is named as replaying the checkpoint's steps."""
    ref = ProcessLog(pid=1, steps=[{**step(g + 1, float(g + 1)), "input": f"rows{g}"} for g in range(32)])
    again = ProcessLog(pid=2, steps=[{**step(i + 1, 100.0 + i), "input": f"rows{i}"} for i in range(24)])
    found = alignment.finding(ref, again, 8)
    assert found is not None and found.kind == "steps-replayed"
    assert (found.details["first_step"], found.details["last_step"]) == (1, 8)
    right = ProcessLog(pid=2, steps=[{**step(i + 1, 100.0 + i), "input": f"rows{i + 8}"} for i in range(24)])
    assert alignment.finding(ref, right, 8) is None


def test_the_input_fingerprint_is_of_the_outermost_module_with_parameters_and_its_latest_call_at_its_start():
    import torch

    from chaosckpt.agent.consumed import Consumed

    forwards = []
    consumed = Consumed(lambda: forwards.append(torch.get_rng_state()))
    consumed.install()
    try:
        scale = torch.nn.Identity()  # no parameters: not the model
        model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Dropout(0.5))
        assert consumed.take() is None
        first, second = torch.arange(8.0).reshape(2, 4), torch.ones(3, 4)
        before = torch.get_rng_state()
        model(scale(first))
        assert len(forwards) == 1 and torch.equal(forwards[0], before)  # as the forward began, before dropout drew
        assert not torch.equal(torch.get_rng_state(), before)
        model(second)
        taken = consumed.take()
        assert taken is not None and taken.endswith(".3x4") and consumed.take() is None
        model(second)
        assert consumed.take() == taken
        model(first)
        assert consumed.take() not in (None, taken)
        with torch.no_grad():  # an evaluation pass is neither the step's input nor its fetch point
            model(second)
        assert consumed.take() is None and len(forwards) == 4
    finally:
        if consumed._finder is not None:
            consumed._finder.remove()
