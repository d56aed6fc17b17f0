"""Data coverage from the agent's ``sampler`` events: which rows each rank read, per pass, and in which order.

Three questions, each a kind of finding:

* ``sampler-overlap`` / ``sampler-missing``: in each pass of a distributed
  sampler, did the ranks together read every row exactly once (allowing the
  padding or the dropped tail that DistributedSampler itself adds)?
* ``epoch-order-replayed`` / ``epoch-order-differs``: does each resumed pass
  read the rows in the order the uninterrupted run read at the same step?
* ``sampler-epoch-never-set``: does the uninterrupted run read one shuffled
  order every epoch, because the job never calls ``set_epoch``?

Passes line up across ranks by their ordinal within a sampler stream (the
same sampler class over the same dataset length), since ranks move through
their epochs together; a pass lines up with the reference by its start step.
"""

from __future__ import annotations

import base64
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import Event, ProcessLog, RunLog

EXAMPLES = 5

StreamKey = Tuple[str, Optional[int]]


@dataclass
class Pass:
    """One rank's pass over a sampler, its indices as a bit set plus repeats."""

    rank: int
    sampler: str
    size: Optional[int]
    replicas: Optional[int]
    shuffle: Optional[bool]
    epoch: Optional[int]
    step: int
    n: int
    crc: Optional[str]
    bits: Optional[int]
    extra: Dict[int, int] = field(default_factory=dict)

    @property
    def key(self) -> StreamKey:
        return (self.sampler, self.size)


def decode(event: Event) -> Pass:
    """A ``sampler`` event as a ``Pass``; ``bits`` is None when the agent could not record the indices."""
    bits: Optional[int] = None
    extra: Dict[int, int] = {}
    if event.get("indices") is not None:
        counts = Counter(event["indices"])
        bits = 0
        for index, count in counts.items():
            if index >= 0:
                bits |= 1 << index
            if count > 1:
                extra[index] = count - 1
    elif event.get("bits") is not None:
        bits = int.from_bytes(zlib.decompress(base64.b64decode(event["bits"])), "little")
        extra = {int(k): v for k, v in (event.get("dups") or {}).items()}
    return Pass(
        rank=event.get("rank") or 0,
        sampler=event.get("sampler") or "sampler",
        size=event.get("size"),
        replicas=event.get("replicas"),
        shuffle=event.get("shuffle"),
        epoch=event.get("epoch"),
        step=event.get("step") or 0,
        n=event.get("n") or 0,
        crc=event.get("crc"),
        bits=bits,
        extra=extra,
    )


def streams(proc: ProcessLog) -> Dict[StreamKey, List[Pass]]:
    """The complete passes of one process, per sampler stream, in order."""
    out: Dict[StreamKey, List[Pass]] = {}
    for event in proc.passes:
        if event.get("complete"):
            p = decode(event)
            out.setdefault(p.key, []).append(p)
    return out


def lowest(bits: int, k: int = EXAMPLES) -> List[int]:
    """The ``k`` smallest members of a bit set."""
    out = []
    while bits and len(out) < k:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _epochs(group: List[Pass]) -> str:
    return ", ".join(f"rank {p.rank}" + (f" at epoch {p.epoch}" if p.epoch is not None else "") for p in group)


def _group_findings(group: List[Pass], run: str, number: int) -> List[Finding]:
    """Overlap and missing rows of one pass across ranks."""
    union = 0
    for p in group:
        union |= p.bits
    size = group[0].size
    total = sum(p.n for p in group)
    distinct = union.bit_count()
    universe = (1 << size) - 1 if size is not None else union
    missing = universe & ~union
    extra_reads = total - distinct
    allowed_extra = max(0, total - size) if size is not None else 0
    allowed_missing = max(0, size - total) if size is not None else 0
    where = f"in the {run}'s {_ordinal(number)} pass over its {group[0].sampler} ({size} rows; {_epochs(group)})"
    epochs = {str(p.rank): p.epoch for p in group}
    findings = []
    if extra_reads > allowed_extra:
        pairs = []
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                both = a.bits & b.bits
                if both:
                    pairs.append({"ranks": [a.rank, b.rank], "count": both.bit_count(), "examples": lowest(both)})
        for p in group:
            if p.extra:
                pairs.append({"ranks": [p.rank], "count": sum(p.extra.values()), "examples": sorted(p.extra)[:EXAMPLES]})
        worst = max(pairs, key=lambda x: x["count"]) if pairs else {"ranks": [], "count": extra_reads, "examples": []}
        who = " and ".join(f"rank {r}" for r in worst["ranks"]) or "the ranks"
        why = ("the ranks disagree about the sampler epoch; every rank must restore the same one"
               if len({p.epoch for p in group}) > 1 else "the ranks' samplers do not split the data between them")
        findings.append(Finding(
            "sampler-overlap",
            f"{where}, {who} read the same {worst['count']} rows (e.g. {worst['examples']}): {extra_reads} rows "
            f"were read twice; {why}",
            {"run": run, "pass": number, "epochs": epochs, "reads_too_many": extra_reads, "overlaps": pairs},
        ))
    if missing.bit_count() > allowed_missing:
        findings.append(Finding(
            "sampler-missing",
            f"{where}, {missing.bit_count()} rows were read by no rank (e.g. {lowest(missing)})",
            {"run": run, "pass": number, "epochs": epochs, "count": missing.bit_count(), "examples": lowest(missing)},
        ))
    return findings


def partition(run: RunLog, name: str) -> List[Finding]:
    """Per pass of every distributed sampler stream: every row read exactly once across its ranks.

    One finding per kind: the first pass where it happens, with the numbers of all such passes.
    """
    per_rank = {rank: streams(proc) for rank, proc in run.ranks().items()}
    keys = {key for s in per_rank.values() for key in s}
    found: Dict[str, Finding] = {}
    for key in sorted(keys, key=str):
        length = max(len(s.get(key, [])) for s in per_rank.values())
        for i in range(length):
            group = [s[key][i] for s in per_rank.values() if len(s.get(key, [])) > i]
            replicas = group[0].replicas or 1
            if replicas < 2 or len(group) < replicas or any(p.bits is None for p in group):
                continue
            for finding in _group_findings(group, name, i + 1):
                if finding.kind in found:
                    found[finding.kind].details.setdefault("passes", [found[finding.kind].details["pass"]]).append(i + 1)
                else:
                    found[finding.kind] = finding
    return list(found.values())


def epoch_never_set(reference: RunLog) -> List[Finding]:
    """Shuffling samplers whose epoch never moved, so that every pass of the reference read the same order."""
    stuck: Dict[StreamKey, List[int]] = {}
    passes: Dict[StreamKey, Tuple[int, Optional[int]]] = {}
    for rank, proc in reference.ranks().items():
        for key, ps in streams(proc).items():
            shuffled = [p for p in ps if p.epoch is not None and p.shuffle]
            if len(shuffled) < 2 or len(shuffled) != len(ps):
                continue
            if len({p.epoch for p in ps}) == 1 and len({p.crc for p in ps}) == 1:
                stuck.setdefault(key, []).append(rank)
                passes[key] = (len(ps), ps[0].epoch)
    findings = []
    for key, ranks in stuck.items():
        count, epoch = passes[key]
        findings.append(Finding(
            "sampler-epoch-never-set",
            f"in the uninterrupted run, the {key[0]} of rank{'s' if len(ranks) > 1 else ''} "
            f"{', '.join(map(str, ranks))} stayed at epoch {epoch} for all {count} passes, so every epoch read the "
            f"same shuffled order; call sampler.set_epoch(epoch) at the start of each epoch",
            {"sampler": key[0], "size": key[1], "ranks": ranks, "passes": count, "epoch": epoch},
        ))
    return findings


def _order_finding(rank: Optional[int], resumed: Pass, global_step: int, expected: Pass,
                   ref_passes: List[Pass]) -> Finding:
    same = next((p for p in ref_passes if p.crc == resumed.crc), None)
    evidence = {"rank": rank, "step": global_step, "sampler": resumed.sampler}
    who = f"rank {rank}'s" if rank is not None else "the"
    if resumed.epoch is None:
        return _generator_order_finding(who, resumed, global_step, same, evidence)
    evidence.update(epoch=resumed.epoch, expected_epoch=expected.epoch)
    where = f"{who} resumed pass over its {resumed.sampler} after step {global_step} (sampler epoch {resumed.epoch})"
    if same is not None and same.epoch is not None:
        evidence["replayed_epoch"] = same.epoch
        evidence["replayed_step"] = same.step
        return Finding(
            "epoch-order-replayed",
            f"{where} read the rows in the order of epoch {same.epoch}, which the uninterrupted run read after step "
            f"{same.step}; at this step it read epoch {expected.epoch}'s order. Save the epoch in the checkpoint and "
            f"call sampler.set_epoch() with it on resume",
            evidence,
        )
    return Finding(
        "epoch-order-differs",
        f"{where} read the rows in an order the uninterrupted run never read; at this step it read epoch "
        f"{expected.epoch}'s order",
        evidence,
    )


def _generator_order_finding(who: str, resumed: Pass, global_step: int, same: Optional[Pass],
                             evidence: Dict) -> Finding:
    """A sampler without an epoch (RandomSampler and the like) takes its order from the generator it draws from."""
    where = f"{who} resumed pass over its {resumed.sampler} after step {global_step}"
    cause = (f"a {resumed.sampler} has no epoch: each pass draws its order from the sampler's generator (the "
             "DataLoader's generator=, or the global torch stream when it has none), which the resume did not "
             "restore. Save that generator's get_state() in the checkpoint and set_state() it on resume")
    if same is not None:
        evidence["replayed_step"] = same.step
        return Finding("epoch-order-replayed", f"{where} read the rows in the order the uninterrupted run read "
                       f"after step {same.step}, not the order it read at this step: {cause}", evidence)
    return Finding("epoch-order-differs", f"{where} read the rows in an order the uninterrupted run never read: "
                   f"{cause}", evidence)


def order(reference: RunLog, resume: RunLog, recovered: Dict[int, Optional[int]]) -> List[Finding]:
    """Per rank, the first resumed pass whose order is not the reference's order at the same global step."""
    ref_ranks = reference.ranks()
    findings = []
    for rank, proc in resume.ranks().items():
        start = recovered.get(rank)
        ref = ref_ranks.get(rank)
        if start is None or ref is None:
            continue
        ref_streams = streams(ref)
        for key, ps in sorted(streams(proc).items(), key=lambda item: str(item[0])):
            ref_passes = ref_streams.get(key, [])
            by_step = {}
            for p in ref_passes:
                by_step.setdefault(p.step, p)
            mismatch = next(
                ((p, start + p.step) for p in ps if start + p.step in by_step and p.crc != by_step[start + p.step].crc),
                None,
            )
            if mismatch is not None:
                resumed, g = mismatch
                findings.append(_order_finding(rank if len(ref_ranks) > 1 else None, resumed, g, by_step[g], ref_passes))
                break
    return findings
