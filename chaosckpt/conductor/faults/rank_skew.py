"""``rank-skew``: a multi-rank job is SIGKILLed while one rank is mid-save and every other rank has finished
it; with ``variant``, the resume also shifts one rank's sampler epoch (``offset``) or resets every rank's."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming, FaultKind, Needs
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS, Trigger, whole
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs.runlog import RunLog

VARIANTS = ("kill", "offset", "reset")
"""The kill alone; plus one rank's sampler epoch shifted by ``offset`` on resume; plus every epoch reset."""


class RankSkew(FaultKind):
    name = "rank-skew"
    scenario = "rank-epoch-skew"
    trigger_keys = (*PLACEMENT_KEYS, "fraction", "write", "rank", "variant", "offset")
    needs = Needs(ranks=2)

    def check(self, trigger: Trigger, where: str) -> None:
        if not whole(trigger.rank, -1):
            raise UsageError(f"{where}: trigger.rank must be a rank number, or -1 for the last, got {shown(trigger.rank)}")
        if trigger.variant not in VARIANTS:
            raise UsageError(f"{where}: trigger.variant must be one of {', '.join(VARIANTS)}, got {shown(trigger.variant)}")
        if not whole(trigger.offset, -10**6) or trigger.offset == 0:
            raise UsageError(f"{where}: trigger.offset must be a whole number other than 0, got {shown(trigger.offset)}")

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        """A halt, like a kill's, in the target rank's save, placed from that rank's own saves."""
        world = reference.world_size()
        if world < self.needs.ranks:  # a launcher of the user's own started one rank: none to disagree with
            raise arming.NotArmable(f"{self.scenario} needs a job of {self.needs.ranks} or more ranks and this one ran "
                                    f"{world}; give --nproc N, or start the ranks with a launcher after --")
        rank = target_rank(trigger, reference)
        spec, target = arming.start(self.agent_kind, trigger, RunLog([reference.ranks()[rank]]), how.track)
        spec.update(arming.in_save(trigger, target))  # type: ignore[typeddict-item]
        spec["rank"] = rank
        return spec, None

    def hold(self, reference: RunLog, fault: protocol.FaultSpec) -> Optional[Callable[[Path], bool]]:
        """Every other rank that makes the save has finished it."""
        procs = reference.ranks()
        others = [r for r, p in procs.items() if r != fault["rank"] and len(p.completed_saves()) >= fault["save"]]
        calls = {r: len(procs[r].completed_saves()[fault["save"] - 1].files) for r in others}
        return functools.partial(saves_finished, ranks=others, save=fault["save"], calls=calls) if others else None

    def resume_env(self, trigger: Trigger, reference: RunLog) -> Dict[str, str]:
        """The sampler skew of the ``offset`` and ``reset`` variants."""
        if trigger.variant == "kill":
            return {}
        spec: Dict = {"variant": trigger.variant}
        if trigger.variant == "offset":
            spec["offset"] = trigger.offset
            spec["rank"] = reference.world_size() - 1 if trigger.rank == -1 else trigger.rank
        return {protocol.ENV_SAMPLER_SKEW: json.dumps(spec)}


def target_rank(trigger: Trigger, reference: RunLog) -> int:
    """The rank held mid-save: ``trigger.rank``, or for -1 the last rank that made the save."""
    world = reference.world_size()
    saves = {rank: len(p.completed_saves()) for rank, p in reference.ranks().items()}
    savers = [rank for rank, n in saves.items() if n >= trigger.save]
    if not any(saves.values()):
        raise arming.NotArmable(arming.NEVER_SAVED)
    if trigger.rank == -1:
        if not savers:
            raise arming.NotArmable(
                f"no rank completed {trigger.save} checkpoint saves in the uninterrupted run; use --param save=N "
                f"with N <= {max(saves.values(), default=0)}, or make the job save more often"
            )
        return max(savers)
    if trigger.rank >= world:
        raise arming.NotArmable(f"--param rank={trigger.rank}: the job ran with {world} rank(s)")
    if trigger.rank not in savers:
        raise arming.NotArmable(
            f"rank {trigger.rank} completed {saves.get(trigger.rank, 0)} checkpoint saves in the uninterrupted run and "
            f"the scenario interrupts its save {trigger.save}; pick a rank that saves (ranks {savers or 'none'})"
        )
    return trigger.rank


def saves_finished(events_dir: Path, ranks: List[int], save: int, calls: Optional[Dict[int, int]] = None) -> bool:
    """Whether each of ``ranks`` has completed its checkpoint number ``save``, as its events say: the checkpoint
    ended, or it made as many save calls as in the reference (``calls``), all returned; a checkpoint ends only
    at the next step, which a rank waiting for the held one in a collective never reaches."""
    done = RunLog.read(events_dir).ranks()

    def finished(rank: int) -> bool:
        saves = [s for s in done[rank].saves if s.index == save] if rank in done else []
        if not saves:
            return False
        want = (calls or {}).get(rank, 0)
        returned = [f for f in saves[0].files if f.get("ok")]
        return bool(saves[0].ok) or (want > 0 and len(returned) >= want)

    return all(finished(r) for r in ranks)


KIND = RankSkew()
