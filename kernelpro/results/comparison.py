"""A side-by-side comparison (`kernelpro compare`, optimize --confirm) as a record: its rounds, folded
from the harness's result records, and rebuilt from the store for the report and the CLI."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelpro.results.record import Result


@dataclass
class Comparison:
    task: str
    labels: list[str]
    paths: list[str]
    rounds: list[dict[str, float | None]] = field(default_factory=list)   # label -> median ms in that round
    judged: list[str] = field(default_factory=list)                       # the fully judged label per round
    baseline_ms: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    energy: list[dict[str, float | None]] = field(default_factory=list)   # label -> J per call in that round
    telemetry: list[dict[str, Any]] = field(default_factory=list)          # per round: protocol, "*" and steady

    @property
    def disqualified(self) -> set[str]:
        """Labels that failed a round judging them in full: their timings as a rival do not count either."""
        return {j for r, j in zip(self.rounds, self.judged, strict=True) if r.get(j) is None}

    def ratios(self, label: str) -> list[float]:
        """ms(first) / ms(label) per round where both were timed: > 1 means `label` is faster."""
        first = self.labels[0]
        if {first, label} & self.disqualified:
            return []
        return [r[first] / r[label] for r in self.rounds if r.get(first) and r.get(label)]

    def energy_ratios(self, label: str) -> list[float]:
        """J(first) / J(label) per round where both were measured: > 1 means `label` uses less energy."""
        first = self.labels[0]
        if {first, label} & self.disqualified:
            return []
        return [e[first] / e[label] for e in self.energy if e.get(first) and e.get(label)]

    def summary(self) -> list[dict[str, Any]]:
        rows = []
        for lab, path in zip(self.labels, self.paths, strict=True):
            ms = [] if lab in self.disqualified else [r[lab] for r in self.rounds if r.get(lab)]
            rat = self.ratios(lab)
            js = [] if lab in self.disqualified else [e[lab] for e in self.energy if e.get(lab)]
            erat = self.energy_ratios(lab)
            rows.append({"label": lab, "path": path, "rounds": len(ms), "disqualified": lab in self.disqualified,
                         "median_ms": statistics.median(ms) if ms else None,
                         "ratio_median": statistics.median(rat) if rat else None,
                         "ratio_min": min(rat) if rat else None, "ratio_max": max(rat) if rat else None,
                         "faster_in": sum(1 for x in rat if x > 1.0),
                         "j_per_call_median": statistics.median(js) if js else None,
                         "energy_ratio_median": statistics.median(erat) if erat else None,
                         "energy_ratio_min": min(erat) if erat else None,
                         "energy_ratio_max": max(erat) if erat else None})
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def add_round(cmp: Comparison, r: int, judged: str, rec: Result, baseline: str) -> None:
    """Fold one round's harness record (judged file = `judged`, others as `rival:<label>`) into `cmp`."""
    got: dict[str, float | None] = {lab: None for lab in cmp.labels}
    if rec.ok and rec.candidate_ms is not None:
        got[judged] = rec.candidate_ms
        for lab in cmp.labels:
            got[lab] = rec.median_ms(f"rival:{lab}") if lab != judged else got[lab]
        for k, v in ((rec.timing or {}).get("notes") or {}).items():
            if k.startswith("rival:"):
                cmp.notes.append(f"round {r + 1}: {k[len('rival:'):]}: {v}")
    else:
        detail = rec.detail or ""
        cmp.notes.append(f"round {r + 1}: {judged} failed: {rec.reason}: "
                         f"{detail.splitlines()[0][:160] if detail else ''}")
    joules: dict[str, float | None] = {lab: None for lab in cmp.labels}
    if rec.ok and rec.j_per_call("candidate") is not None:
        joules[judged] = rec.j_per_call("candidate")
        for lab in cmp.labels:
            if lab != judged and rec.j_per_call(f"rival:{lab}") is not None:
                joules[lab] = rec.j_per_call(f"rival:{lab}")
    timing = rec.timing or {}
    cmp.energy.append(joules)
    cmp.telemetry.append({"protocol": timing.get("protocol", "interleaved"), **(timing.get("telemetry") or {}),
                          "steady": (timing.get("steady") or {}).get("outcome")})
    cmp.rounds.append(got)
    cmp.judged.append(judged)
    cmp.baseline_ms.append(rec.median_ms(baseline))


def load_comparison(store: Any, run_id: int) -> Comparison:
    """Rebuild a stored comparison (a `compare` run, or the --confirm of an optimize run) from its rounds."""
    run = store.get_run(run_id)
    cfg = run["config"]
    cmp = Comparison(task=cfg.get("task_key", ""), labels=list(cfg["labels"]), paths=list(cfg["candidates"]))
    owner = cfg.get("optimize_run", run_id)          # --confirm stores rounds on the search's candidates
    # Rounds recorded before compare_run/compare_label were stored: the run's own candidates, and the judged
    # file follows from the round number exactly as compare() rotates it.
    recs = [Result.from_dict(r["payload"]) for c in store.candidates(owner)
            for r in store.results("evaluations", c["id"]) if "compare_round" in r["payload"]]
    recs = [x for x in recs if (x.compare_run if x.compare_run is not None
                                else (run_id if owner == run_id else None)) == run_id]
    for rec in sorted(recs, key=lambda x: x.compare_round or 0):
        r = int(rec.compare_round or 0) - 1
        add_round(cmp, r, rec.compare_label or cmp.labels[r % len(cmp.labels)], rec, cfg.get("baseline", "eager"))
    return cmp
