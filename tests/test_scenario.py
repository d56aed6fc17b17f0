"""Scenario files: the built-ins load, bad files are named with file and line, parameters override."""

from __future__ import annotations

import pytest

from chaosckpt.conductor import params, scenario
from chaosckpt.conductor.errors import UsageError

GOOD = 'name = "mine"\nfault = "kill"\n[trigger]\nsave = 3\nwrite = 4\n[expect]\nrecovered = ["last-good", "older"]\n'


def test_every_builtin_loads():
    assert {"kill9-mid-save", "enospc", "power-loss"} <= set(scenario.builtin_names())
    for name in scenario.builtin_names():
        assert scenario.load(name).name == name
    scen = scenario.load("kill9-mid-save")
    assert (scen.trigger.save, scen.trigger.fraction, scen.trigger.write) == (2, 0.5, None)
    assert scen.expect.recovered == ("last-good",) and scen.expect.reproduced is True


def test_a_file_of_ones_own(fs):
    fs.create_file("/p/mine.toml", contents=GOOD)
    scen = scenario.load("/p/mine.toml")
    assert scen.name == "mine" and scen.trigger.save == 3 and scen.trigger.write == 4
    assert scen.expect.recovered == ("last-good", "older")


def test_overrides_replace_file_values_and_a_fraction_replaces_a_write():
    scen = scenario.parse(GOOD, "mine.toml", {"save": 5, "trigger.fraction": 0.25, "expect.reproduced": False})
    assert (scen.trigger.save, scen.trigger.fraction, scen.trigger.write) == (5, 0.25, None)
    assert scen.expect.reproduced is False


@pytest.mark.parametrize(
    "text, message",
    [
        ('name = "x"\nfault = "kill"\n[trigger\n', "mine.toml: not valid TOML: .*line 3"),
        ('name = "x"\nfault = "nuke"\n', "unknown fault 'nuke'"),
        ('fault = "kill"\n', "'name' must be a non-empty string"),
        ('name = "x"\nfault = "kill"\ncolour = 1\n', "unknown key 'colour'"),
        ('name = "x"\nfault = "kill"\ntrigger = 3\n', r"\[trigger\] must be a table"),
        ('name = "x"\nfault = "kill"\n[trigger]\nsave = true\n', "trigger.save must be a whole number"),
        ('name = "x"\nfault = "kill"\n[expect]\nreproduced = "yes"\n', "expect.reproduced must be true or false"),
    ],
)
def test_bad_files(text, message):
    with pytest.raises(UsageError, match=message):
        scenario.parse(text, "mine.toml")


def test_override_of_an_unknown_section():
    with pytest.raises(UsageError, match="only trigger.\\* and expect.\\* keys"):
        scenario.parse(GOOD, "mine.toml", {"fault.kind": "x"})


@pytest.mark.parametrize("key, value, text", [("model", "strict", "model=strict"), ("save", 3, "save=3"),
                                              ("signal", "15", 'signal="15"'), ("x", "true", 'x="true"'),
                                              ("after", "45m", "after=45m"), ("fraction", 0.25, "fraction=0.25"),
                                              ("name", "plain words", "name=plain words"), ("e", "", 'e=""')])
def test_a_parameter_is_written_back_as_typed_and_reads_back_the_same(key, value, text):
    assert params.param_text(key, value) == text and params.parse_param(text) == (key, value)


def test_parse_param_reads_toml_literals():
    assert params.parse_param("save=3") == ("save", 3)
    assert params.parse_param("fraction=0.25") == ("fraction", 0.25)
    assert params.parse_param("expect.recovered=['older']") == ("expect.recovered", ["older"])
    assert params.parse_param("name=plain words") == ("name", "plain words")
    with pytest.raises(UsageError):
        params.parse_param("=3")


def test_missing_file():
    with pytest.raises(UsageError, match="does not exist"):
        scenario.load("nowhere.toml")


def test_each_fault_takes_only_its_own_trigger_keys():
    with pytest.raises(UsageError, match=r"^--param model=strict: kill9-mid-save has no parameter 'model' \(it is a "
                                         r"parameter of power-loss\); it takes save, step"):
        scenario.load("kill9-mid-save", {"model": "strict"})
    with pytest.raises(UsageError, match=r"^--param sav=3: kill9-mid-save has no parameter 'sav' \(did you mean save\?\)"):
        scenario.load("kill9-mid-save", {"sav": 3})
    with pytest.raises(UsageError, match=r"^--param expect.recoverd=older: .* no expectation 'recoverd' \(did you mean "
                                         r"recovered\?\)"):
        scenario.load("kill9-mid-save", {"expect.recoverd": "older"})
    with pytest.raises(UsageError, match="trigger.model must be one of ordered, strict"):
        scenario.load("power-loss", {"model": "eventual"})
    assert scenario.load("power-loss", {"op": 3}).params()["trigger"] == {"save": 2, "op": 3, "model": "ordered"}
    assert scenario.load("enospc", {"free_bytes": 0}).trigger.free_bytes == 0


def test_what_a_scenario_needs_comes_from_its_file_its_fault_kind_and_its_trigger():
    assert scenario.load("node-loss").needs == scenario.Needs(nodes=2)
    assert scenario.load("rank-epoch-skew").needs == scenario.Needs(ranks=2)
    assert scenario.load("kill9-mid-save").needs == scenario.Needs()
    # a file of one's own without [needs]: its rank-skew fault, or a trigger naming a node, still needs them
    own = scenario.parse('name = "skew"\nfault = "rank-skew"\n', "skew.toml")
    assert own.needs == scenario.Needs(ranks=2) and own.unmet(1, 2) is None and own.unmet(1, None) is None
    assert "needs a job of 2 or more ranks and this one runs 1; give --nproc N" in own.unmet(1, 1)
    node = scenario.load("kill9-mid-save", {"node": 0})
    assert node.needs.nodes == 2 and "--nnodes N" in node.unmet(1, 1) and node.unmet(2, 2) is None
    with pytest.raises(UsageError, match=r"x.toml: needs.ranks must be a whole number >= 1, got \"2\""):
        scenario.parse('name = "x"\nfault = "kill"\n[needs]\nranks = "2"\n', "x.toml")


def test_a_job_that_never_saved_is_told_so_and_what_to_check():
    from chaosckpt.conductor.faults import arming, placement
    from chaosckpt.conductor.runs.runlog import RunLog

    for place in (lambda s: arming.start(s.kind.agent_kind, s.trigger, RunLog([]), None),
                  lambda s: placement.resolve(s, RunLog([]))):
        with pytest.raises(arming.NotArmable) as caught:
            place(scenario.load("kill9-mid-save", {"save": -1}))
        assert str(caught.value).startswith("the job never saved a checkpoint in its reference run")
        assert "N <=" not in str(caught.value)
