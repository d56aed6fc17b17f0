"""Fault kinds: where each fires, how it is armed, what its resume needs and what it finds.

The registry: one module per kind, each with its ``KIND``. A new kind is its module, a line here and a
scenario TOML whose ``fault`` names it."""

from __future__ import annotations

from typing import Dict, List, Literal

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.faults import (enospc, eval_left_on, kill, node_loss, node_power_loss, power_loss, preemption,
                                       rank_skew)
from chaosckpt.conductor.faults.kind import FaultKind
from chaosckpt.conductor.faults.trigger import Trigger

FaultName = Literal["kill", "enospc", "power-loss", "eval-left-on", "rank-skew", "preempt"]
"""The ``fault`` a scenario names."""
KINDS: Dict[str, FaultKind] = {k.name: k for k in (kill.KIND, enospc.KIND, power_loss.KIND, eval_left_on.KIND,
                                                   rank_skew.KIND, preemption.KIND)}
ON_NODE: Dict[str, FaultKind] = {kill.KIND.name: node_loss.KIND, power_loss.KIND.name: node_power_loss.KIND}
"""What a kind that ``takes_node`` becomes when its trigger names one node of a multi-node job."""
DEFAULT_SCENARIO = kill.KIND.scenario
"""The scenario run when none is named."""


def named(fault: str, where: str) -> FaultKind:
    """The kind a scenario's ``fault`` names; a usage error naming the known ones for any other value."""
    if fault not in KINDS:
        raise UsageError(f"{where}: unknown fault '{fault}' (known: {', '.join(KINDS)})")
    return KINDS[fault]


def kind_of(fault: FaultName, trigger: Trigger) -> FaultKind:
    """The kind of a scenario's fault as its trigger places it: on one node of a multi-node job or the whole job."""
    kind = KINDS[fault]
    return ON_NODE[fault] if kind.takes_node and trigger.node is not None else kind


def swept_by_default() -> List[str]:
    """The scenarios a one-process job's default suite sweeps too: those of the kinds whose sweep shares the faulted
    run of their own trial (a kill, a power loss), so that a sweep costs its resumes only."""
    return [k.scenario for k in KINDS.values() if k.sweepable and k.shareable]


def check_sweep(scenario, sweep: bool) -> None:
    """``--sweep`` walks the crash points of a save, so it needs a fault that stops the job inside one."""
    if sweep and not scenario.kind.sweepable:
        shown = [k.scenario for k in KINDS.values() if k.sweepable]
        raise UsageError(f"--sweep does not apply to {scenario.name}: its fault ({scenario.fault}) does not stop a "
                         f"save midway; use it with {', '.join(shown[:-1])} or {shown[-1]}")
