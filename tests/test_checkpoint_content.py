"""What ``checkpoint_content`` finds in checkpoint objects: view bloat, sizes, RNG states, counters, advice."""

from __future__ import annotations

import ast
import random
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from chaosckpt import checkpoint_content as cc


def kinds(result):
    return [f["kind"] for f in result["findings"]]


def rng_at(obj, **kwargs):
    return {r["path"]: r["kind"] for r in cc.scan(obj)["rng_states"]}


def test_imports_only_the_standard_library_and_torch():
    tree = ast.parse(Path(cc.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots, "the module imports something"
    assert all(r in sys.stdlib_module_names or r in ("torch", "__future__") for r in roots), roots


def test_seed_slice_of_a_big_buffer_is_bloat_with_path_and_bytes():
    flat = torch.zeros(1_000_000)
    head = flat[:10]
    result = cc.analyse({"model": {"head.weight": head}, "step": 1})
    [finding] = [f for f in result["findings"] if f["kind"] == "checkpoint-view-bloat"]
    assert finding["path"] == "model.head.weight"
    assert finding["view_bytes"] == head.numel() * head.element_size()
    assert finding["stored_bytes"] == flat.untyped_storage().nbytes()
    assert finding["stored_bytes"] > 1000 * finding["view_bytes"]
    assert "model.head.weight.clone()" in finding["message"]


def test_the_clone_is_not_bloat():
    flat = torch.zeros(1_000_000)
    result = cc.analyse({"model": {"head.weight": flat[:10].clone()}, "step": 1})
    assert result["findings"] == []
    assert result["contents"]["bytes"] == 40


def test_key_path_through_optimizer_state_lists_and_int_keys():
    big, other = torch.zeros(1_000_000), torch.zeros(1_000_000)
    obj = {"opt": {"state": {0: {"exp_avg": big[5:20]}}, "param_groups": [{"lr": 0.1}]}, "hist": [1, other[:3]], "step": 2}
    paths = sorted(b["path"] for b in cc.scan(obj)["bloat"])
    assert paths == ["hist[1]", "opt.state[0].exp_avg"]


def test_one_finding_per_storage_naming_all_its_small_views():
    big = torch.zeros(1_000_000)
    [bloat] = cc.scan({"a": big[:10], "b": big[100:110], "step": 0})["bloat"]
    assert bloat["paths"] == ["a", "b"]
    assert bloat["view_bytes"] == 80 and bloat["stored_bytes"] == 4_000_000


def test_views_that_cover_their_storage_together_are_not_bloat():
    flat = torch.zeros(1_000_000)
    carved = {f"p{i}": flat[i * 250_000:(i + 1) * 250_000] for i in range(4)}
    contents = cc.scan({"model": carved, "step": 0})
    assert contents["bloat"] == []
    assert contents["bytes"] == 4_000_000


def test_tied_weights_saved_twice_are_one_storage_and_not_bloat():
    weight = torch.zeros(2_000, 1_000)
    contents = cc.scan({"model": {"embed.weight": weight, "head.weight": weight}, "step": 0})
    assert contents["bloat"] == []
    assert contents["keys"] == [{"key": "model", "bytes": 8_000_000, "tensors": 2}, {"key": "step", "bytes": 0, "tensors": 0}]


def test_strided_view_counts_the_bytes_a_clone_would_keep():
    big = torch.zeros(1_000_000)
    [bloat] = cc.scan({"every_1000th": big[::1000]})["bloat"]
    assert bloat["view_bytes"] == 1000 * 4


def test_small_waste_is_below_the_threshold():
    small = torch.zeros(100_000)
    assert cc.scan({"x": small[:10]})["bloat"] == []
    assert cc.VIEW_BLOAT_MIN_WASTE > small.untyped_storage().nbytes()


def test_meta_tensors_are_measured_without_data():
    storage = torch.UntypedStorage(8_000_000, device="meta")
    view = torch.empty(0, device="meta").set_(storage, 0, (4,), (1,))
    [bloat] = cc.scan({"w": view})["bloat"]
    assert (bloat["view_bytes"], bloat["stored_bytes"]) == (16, 8_000_000)


def test_bytes_per_top_level_key_count_shared_storages_once_in_the_total():
    shared = torch.zeros(1000)
    own = torch.zeros(10, dtype=torch.float64)
    contents = cc.scan(OrderedDict(model={"w": shared}, ema={"w": shared, "b": own}, step=3))
    assert [(k["key"], k["bytes"], k["tensors"]) for k in contents["keys"]] == [
        ("model", 4000, 1), ("ema", 4080, 2), ("step", 0, 0)]
    assert contents["bytes"] == 4080 and contents["tensors"] == 3


def test_torch_rng_states():
    gen = torch.Generator().manual_seed(1)
    found = rng_at({"rng": {"cpu": torch.get_rng_state(), "loader": gen.get_state(), "gen": gen,
                            "cuda": [torch.zeros(cc.CUDA_RNG_BYTES, dtype=torch.uint8)] * 2}})
    assert found == {"rng.cpu": "torch CPU generator", "rng.loader": "torch CPU generator",
                     "rng.gen": "torch.Generator object (cpu)", "rng.cuda[0]": "CUDA generator",
                     "rng.cuda[1]": "CUDA generator"}


def test_python_random_states():
    assert rng_at({"py": random.getstate(), "own": random.Random(3), "own_state": random.Random(3).getstate()}) == {
        "py": "Python random", "own": "random.Random object", "own_state": "Python random"}


def test_numpy_random_states():
    np = pytest.importorskip("numpy")
    found = rng_at({"legacy": np.random.get_state(), "pcg": np.random.default_rng(0).bit_generator.state,
                    "dict": np.random.get_state(legacy=False), "gen": np.random.default_rng(0),
                    "rs": np.random.RandomState(0)})
    assert found == {"legacy": "numpy RandomState (MT19937)", "pcg": "numpy bit generator (PCG64)",
                     "dict": "numpy bit generator (MT19937)", "gen": "numpy Generator object",
                     "rs": "numpy RandomState object"}


def test_things_shaped_almost_like_rng_states_are_not():
    assert rng_at({"mask": torch.zeros(16, dtype=torch.uint8), "bytes": torch.zeros(5056, dtype=torch.int8),
                   "triple": (3, (1, 2), None), "pair": ("MT19937", [1, 2, 3], 0, 0, 0.0)}) == {}


def test_step_and_epoch_like_entries():
    obj = {"global_step": 40, "epoch": torch.tensor(3), "iter_num": 7, "sampler": {"epoch": 2}}
    found = {p["path"]: p["value"] for p in cc.scan(obj)["progress"]}
    assert found == {"global_step": 40, "epoch": 3, "iter_num": 7, "sampler.epoch": 2}


def test_counters_of_optimizers_schedulers_and_settings_are_not_the_loop_step():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 5)
    obj = {"opt": opt.state_dict(), "sched": sched.state_dict(), "config": {"epochs": 90},
           "num_steps": 1000, "step": True, "epoch_loss": 0.5, "iter": 1.5}
    result = cc.analyse(obj)
    assert result["contents"]["progress"] == []
    [advice] = [f for f in result["findings"] if f["kind"] == "no-step-in-checkpoint"]
    assert "save the global step" in advice["message"]


def test_rng_states_missing_counts_states_against_the_loops_streams():
    result = cc.analyse({"rng": torch.get_rng_state(), "step": 1}, streams=4)
    [finding] = [f for f in result["findings"] if f["kind"] == "rng-states-missing"]
    assert finding["message"].startswith("this checkpoint carries 1 RNG state; the loop draws from 4 streams")
    assert finding["rng_states"] == [{"path": "rng", "kind": "torch CPU generator"}]


def test_rng_states_missing_names_the_streams_when_given():
    streams = ["torch default CPU generator", "torch.Generator created at train.py:21 (DataLoader.generator)"]
    result = cc.analyse({"step": 1}, streams=streams)
    [finding] = result["findings"]
    assert finding["kind"] == "rng-states-missing"
    assert "carries no RNG state; the loop draws from 2 streams (torch default CPU generator, torch.Generator created at train.py:21" in finding["message"]


def test_enough_rng_states_for_the_streams_is_no_finding():
    obj = {"rng": {"torch": torch.get_rng_state(), "python": random.getstate()}, "step": 1}
    assert kinds(cc.analyse(obj, streams=2)) == []


def test_loader_state_found_or_missing():
    with_state = {"step": 1, "train_loader": {"_num_yielded": 12, "_sampler_iter_state": None}}
    assert cc.scan(with_state)["loader_states"] == [{"path": "train_loader"}]
    assert kinds(cc.analyse(with_state, loader=True)) == []
    assert kinds(cc.analyse({"step": 1}, loader=True)) == ["no-loader-state"]
    sampler_rng = {"step": 1, "sampler_generator": torch.Generator().get_state()}
    assert kinds(cc.analyse(sampler_rng, loader=True)) == []


def test_walk_survives_cycles_and_plain_objects():
    obj = {"step": 1, "note": object()}
    obj["self"] = obj
    contents = cc.scan(obj)
    assert contents["progress"] == [{"path": "step", "name": "step", "value": 1}]
    assert [k["key"] for k in contents["keys"]] == ["step", "note", "self"]


def test_human_bytes():
    assert [cc.human_bytes(n) for n in (40, 1563, 4_001_492, 12_100_000_000)] == ["40 B", "1.6 kB", "4.0 MB", "12.1 GB"]
