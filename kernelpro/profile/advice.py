"""Findings and how they are shown: `advice` (diagnoses), `raw` (the metrics they came from, no
diagnosis), `none` (nothing) — the KernelPro paper's feedback ablation is this one flag."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MODES = ("advice", "raw", "none")
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


@dataclass
class Finding:
    tool: str
    kernel: str
    title: str
    severity: str                                   # high | medium | low
    evidence: dict[str, Any] = field(default_factory=dict)    # metric name -> value
    actions: list[str] = field(default_factory=list)          # one or two concrete changes
    text: str = ""                                  # a few plain-language lines

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-2):
            return f"{v:.3g}"
        return f"{v:,.2f}".rstrip("0").rstrip(".")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), f.kernel, f.tool))


def format_for_prompt(findings: list[Finding], mode: str = "advice", raw_metrics: dict[str, dict[str, Any]] | None = None) -> str:
    """Text for the agent's next prompt.

    advice: each finding's title, text and actions, most severe first.
    raw: per kernel, the metrics the diagnoses were computed from (`raw_metrics` from analysis, plus
         every finding's evidence), with no diagnosis.
    none: the empty string.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "none":
        return ""
    if mode == "raw":
        table: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw_metrics or {}).items()}
        for f in findings:
            table.setdefault(f.kernel, {}).update(f.evidence)
        if not table:
            return "Profiler metrics: none collected."
        lines = ["Profiler metrics (Nsight Compute):"]
        for kernel, metrics in table.items():
            lines.append(f"kernel {kernel}:")
            lines += [f"  {k} = {_fmt(v)}" for k, v in sorted(metrics.items())]
        return "\n".join(lines)
    if not findings:
        return "Profiler advice: no bottleneck found beyond what the roofline shows; the kernel is near its ceiling or nothing stands out."
    lines = ["Profiler advice (most severe first):"]
    for i, f in enumerate(sort_findings(findings), 1):
        lines.append(f"{i}. [{f.severity}] {f.kernel}: {f.title}")
        lines += [f"   {ln}" for ln in f.text.splitlines() if ln.strip()]
        ev = ", ".join(f"{k}={_fmt(v)}" for k, v in list(f.evidence.items())[:4])
        if ev:
            lines.append(f"   evidence: {ev}")
        lines += [f"   -> {a}" for a in f.actions]
    return "\n".join(lines)
