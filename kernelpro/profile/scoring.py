"""How specific the stage-two tools are: precision and recall of each tool on a labelled corpus of
recorded Nsight Compute profiles (tests/data/ncu: *.json recordings, labels.toml with the true
bottleneck(s) of each kernel and a reason per label). Runs on the CPU from the recordings.

A tool's finding on a kernel is a true positive when the kernel is labelled with that tool, a false
positive otherwise (a clean kernel's every finding is one); a label the tool does not fire on is a
false negative. Kernels are scored once however many launches a recording holds.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.errors import KernelProError

ROLES = ("plant", "clean", "control", "reference", "search")


@dataclass(frozen=True)
class LabelledKernel:
    name: str                              # the recording's stem: <name>.json
    role: str
    labels: dict[str, str]                 # tool -> why this kernel is bounded there
    reason: str = ""                       # why a kernel without labels is judged clean

    @classmethod
    def from_toml(cls, name: str, d: dict, tools: set[str]) -> LabelledKernel:
        unknown = sorted(set(d) - {"role", "labels", "reason"})
        if unknown:
            raise KernelProError(f"labels: kernel {name} has unknown keys {unknown}; use role, labels, reason")
        role = d.get("role")
        if role not in ROLES:
            raise KernelProError(f"labels: kernel {name} needs role = one of {', '.join(ROLES)}")
        labels = dict(d.get("labels", {}))
        bad = sorted(set(labels) - tools)
        if bad:
            raise KernelProError(f"labels: kernel {name} labels {bad}, not tools ({', '.join(sorted(tools))})")
        if any(not isinstance(v, str) or not v.strip() for v in labels.values()):
            raise KernelProError(f"labels: kernel {name}: every label needs its reason as a string")
        reason = str(d.get("reason", ""))
        if not labels and not reason.strip():
            raise KernelProError(f"labels: kernel {name} has no label; give reason = why it is clean")
        return cls(name, role, labels, reason)


@dataclass
class ToolScore:
    tool: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    fired_on: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    @property
    def fires(self) -> int:
        return self.tp + self.fp

    @property
    def precision(self) -> float | None:
        return self.tp / self.fires if self.fires else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


def load_labels(path: Path) -> list[LabelledKernel]:
    from kernelpro.profile.tools.registry import load_all

    if not path.is_file():
        raise KernelProError(f"{path}: no labels file; give --labels PATH (a labels.toml beside the recordings)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise KernelProError(f"{path}: not valid TOML ({e})") from None
    tools = set(load_all())
    return [LabelledKernel.from_toml(n, d, tools) for n, d in sorted(data.get("kernels", {}).items())]


def fired(recording: Path) -> set[str]:
    """Which tools report anything on a recording (stages one and two, as `kernelpro profile` runs them)."""
    from kernelpro.profile import analyze
    from kernelpro.profile.collect import load_profiles

    extra = json.loads(recording.read_text())
    a = analyze(load_profiles(recording), requested=tuple(extra.get("requested", ())), dtype=extra.get("dtype"),
                resources=extra.get("ptxas", {}), task_flops=extra.get("task_flops"))
    return {f.tool for f in a.findings}


def score(data_dir: Path, labels: list[LabelledKernel]) -> tuple[list[ToolScore], dict[str, set[str]]]:
    """Per-tool scores over the labelled kernels, and what fired on each kernel."""
    from kernelpro.profile.tools.registry import load_all

    scores = {t: ToolScore(t) for t in sorted(load_all())}
    seen: dict[str, set[str]] = {}
    for k in labels:
        rec = data_dir / f"{k.name}.json"
        if not rec.is_file():
            raise KernelProError(f"labels name {k.name} but {rec} is not recorded")
        got = seen[k.name] = fired(rec)
        for t, s in scores.items():
            if t in got and t in k.labels:
                s.tp += 1
                s.fired_on.append(k.name)
            elif t in got:
                s.fp += 1
                s.fired_on.append(k.name + "*")
            elif t in k.labels:
                s.fn += 1
                s.missed.append(k.name)
    return list(scores.values()), seen
