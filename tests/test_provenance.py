"""Which tensor set a resume took its weights from: the agent's samples of a loaded checkpoint's sets and of the
parameters, and the conductor's matching of the two (chaosckpt/conductor/trial/provenance.py)."""

from __future__ import annotations

import torch
from torch import nn

from chaosckpt.agent import fingerprint, tensorsets
from chaosckpt.agent.recorder import Recorder
from chaosckpt.conductor.runs.runlog import ProcessLog
from chaosckpt.conductor.trial import provenance


def _copy(model, dtype=torch.float32):
    return {k: v.detach().to(dtype).clone() for k, v in model.state_dict().items()}


def _checkpoint():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    ema = {k: v * 0.5 for k, v in _copy(model).items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return {"model": _copy(model), "ema": ema, "model_fp16": _copy(model, torch.float16), "opt": opt.state_dict(),
            "step": 3, "torch": torch.get_rng_state()}


def _resumed(ckpt, key, path="/w/ckpt/last.pt"):
    """The events of a resume that loaded ``ckpt`` and put its ``key`` tensors into a fresh model."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    if key is not None:
        model.load_state_dict(ckpt[key])
    load = {"path": path, "ok": True, "sets": tensorsets.tensor_sets(ckpt)}
    step = {"step": 1, "samples": fingerprint.value_samples(model.parameters())}
    return ProcessLog(pid=1, steps=[step], loads=[load])


def _taken(log):
    return provenance.weights_taken(log, lambda p: p.replace("/w/", ""))


def test_the_agent_finds_each_mapping_of_floating_tensors_and_no_counter_or_rng_state():
    sets = tensorsets.tensor_sets(_checkpoint())
    assert [(s["key"], s["dtype"]) for s in sets] == [("model", "float32"), ("ema", "float32"),
                                                      ("model_fp16", "float16")]
    assert list(sets[0]["samples"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_a_bare_state_dict_is_the_file_s_top_level():
    sets = tensorsets.tensor_sets(_checkpoint()["model"])
    assert [s["key"] for s in sets] == [""]


def test_a_half_precision_copy_samples_like_the_float32_parameters_it_was_loaded_into():
    t = torch.randn(3000)
    assert fingerprint.value_samples([t.half()]) == fingerprint.value_samples([t.half().float()])
    assert fingerprint.value_samples([t.half()]) != fingerprint.value_samples([t])


def test_a_resume_that_loaded_the_ema_is_told_it_took_the_ema_not_the_model():
    [found] = _taken(_resumed(_checkpoint(), "ema"))
    assert found.kind == "resumed-other-weights"
    assert (found.details["key"], found.details["model_key"], found.details["path"]) == ("ema", "model", "ckpt/last.pt")
    assert found.message == ("the resume continued from the tensors under 'ema' in ckpt/last.pt, not the model's "
                             "('model'): load the model's weights from 'model' and 'ema' into the EMA module")


def test_a_resume_that_loaded_the_half_precision_copy_is_told_so():
    [found] = _taken(_resumed(_checkpoint(), "model_fp16"))
    assert found.details["key"] == "model_fp16" and found.details["dtype"] == "float16"
    assert "the half-precision copy under 'model_fp16' in ckpt/last.pt" in found.message
    assert "keep the half-precision copy for inference" in found.message


def test_a_resume_whose_weights_match_no_set_says_so_with_the_closest():
    ckpt = _checkpoint()
    log = _resumed(ckpt, "model")
    log.steps[0]["samples"][0] = "00000000"  # one parameter changed after the load
    [found] = _taken(log)
    assert found.kind == "resumed-weights-unmatched"
    assert "match none of the tensor sets" in found.message
    assert "the closest, under 'model' in ckpt/last.pt, holds 3 of its 4 parameters" in found.message


def test_no_finding_when_the_resume_loaded_no_tensor_set():
    log = ProcessLog(pid=1, steps=[{"step": 1}], loads=[{"path": "/w/x.pt", "ok": True}])
    assert _taken(log) == [] and provenance.weights_taken(None, str) == []


def test_identical_parameters_are_each_matched_by_their_own_tensor():
    zeros = {"a": torch.zeros(4), "b": torch.zeros(4)}
    held = tensorsets.tensor_sets({"m": zeros})[0]["samples"]
    twice = fingerprint.value_samples([torch.zeros(4)] * 2)
    assert provenance._matched(twice, held) == 2
    assert provenance._matched(twice * 2, held) == 2


def test_a_load_after_the_first_step_is_not_where_the_resume_started():
    log = _resumed(_checkpoint(), "ema")
    log.steps[0]["ts"], log.loads[0]["ts"] = 1.0, 2.0
    assert _taken(log) == []
    log.steps[0].pop("samples")
    log.loads[0]["ts"] = 0.5
    assert _taken(log) == []


class _Events:
    def __init__(self):
        self.events = []

    def emit(self, kind, **fields):
        self.events.append({"t": kind, **fields})


def test_the_recorder_samples_the_parameters_only_at_the_first_step_after_a_load_of_tensor_sets():
    events = _Events()
    rec = Recorder(events, None, None)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec.optimizer_created(opt)
    ckpt = _checkpoint()
    rec.loaded("/w/plain.pt", {"step": 3}, None)  # no tensor set: nothing to sample against
    for _ in range(2):
        rec.on_step(opt)
        rec.on_step_end(opt)
    rec.loaded("/w/last.pt", ckpt, None)
    model.load_state_dict(ckpt["ema"])
    for _ in range(2):
        rec.on_step(opt)
        rec.on_step_end(opt)
    loads = [e for e in events.events if e["t"] == "load"]
    steps = [e for e in events.events if e["t"] == "step"]
    assert "sets" not in loads[0] and [s["key"] for s in loads[1]["sets"]] == ["model", "ema", "model_fp16"]
    assert ["samples" in s for s in steps] == [False, False, True, False]
    assert steps[2]["samples"] == list(loads[1]["sets"][1]["samples"].values())


def test_a_bare_state_dict_taken_is_at_the_top_level_of_its_file():
    ckpt = _checkpoint()
    log = _resumed(ckpt["ema"], None, path="/w/ckpt/ema.pt")
    log.steps[0]["samples"] = fingerprint.value_samples(ckpt["ema"].values())
    [found] = _taken(log)
    assert found.message.startswith("the resume continued from the tensors at the top level of ckpt/ema.pt: ")


def test_the_unknown_state_headline_ends_with_the_weights_taken_unless_that_finding_is_ignored():
    from chaosckpt.conductor.results.result import Finding, Trial
    from chaosckpt.conductor.trial import render, verdict

    taken = Finding("resumed-other-weights", "the resume continued from the tensors under 'ema' in ckpt/last.pt")
    trial = Trial(scenario="s", status="failed", headline="", outcome="unknown-state", last_good_step=8,
                  findings=[taken])
    assert render.headline(trial) == ("FAILED s: the resumed job started from a state no run recorded (neither a "
                                      "saved checkpoint nor the initial model); the last good checkpoint was step 8; "
                                      "the resume continued from the tensors under 'ema' in ckpt/last.pt")
    trial.findings = verdict.settle(trial.findings, ["resumed-other-weights"], reproduced=None)
    assert render.headline(trial).endswith("the last good checkpoint was step 8")


def test_a_half_precision_ema_module_pickled_whole_is_a_tensor_set_the_resume_is_traced_to():
    # Ultralytics saves ckpt["ema"] = deepcopy(model).half(), the module itself, and ckpt["model"] = None
    torch.manual_seed(0)
    ema = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).half()
    ckpt = {"epoch": 2, "model": None, "ema": ema}
    assert [(s["key"], s["dtype"]) for s in tensorsets.tensor_sets(ckpt)] == [("ema", "float16")]
    log = _resumed({"ema": ema.float().state_dict()}, "ema")
    log.loads[0]["sets"] = tensorsets.tensor_sets({"epoch": 2, "model": None, "ema": ema.half()})
    [found] = _taken(log)
    assert found.kind == "resumed-other-weights" and found.details["model_key"] is None
    assert found.message == (
        "the resume continued from the half-precision copy under 'ema' in ckpt/last.pt (the parameters equal its "
        "float16 values exactly: the weights rounded to half precision): load the model's weights from "
        "model.state_dict(), saved beside 'ema' (ckpt/last.pt holds no other copy of them) and 'ema' into the EMA "
        "module")
