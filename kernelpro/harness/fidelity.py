"""How a timing was taken, as text: protocol, ratio, clocks, power and energy, read from a result record.

`bench`, `compare` and the report call these (harness sits below all three); nothing here draws a
table, so each caller keeps its own layout. A record written before telemetry existed gives '-'.
"""

from __future__ import annotations

from typing import Any

from kernelpro.harness.telemetry import format_short


def protocols(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{protocol: its stored run} of one result record; an older record's single timing as interleaved."""
    by = rec.get("protocols")
    if isinstance(by, dict) and by:
        return by
    t = rec.get("timing") or {}
    if t.get("stats"):
        return {t.get("protocol", "interleaved"): {**t, "speedup": rec.get("speedup") or {}}}
    return {}


def side_telemetry(run: dict[str, Any], name: str) -> dict[str, Any] | None:
    tel = run.get("telemetry") or {}
    return tel.get(name) or tel.get("*")


def fidelity_lines(rec: dict[str, Any], label: str = "", baselines: tuple[str, ...] | list[str] = ()) -> list[str]:
    """One line per protocol: 'isolated: x vendor 0.941 | candidate 1410 MHz 695 W 63C pwrcap; vendor ...',
    then one line of energy (J/call and J/TFLOP per side) when it was measured."""
    out = []
    pre = f"{label}: " if label else ""
    for proto, run in protocols(rec).items():
        sp = run.get("speedup") or {}
        names = [n for n in (run.get("stats") or {}) if not baselines or n == "candidate" or n in baselines]
        ratios = ", ".join(f"x {b} {v:.3f}" for b, v in sp.items() if not baselines or b in baselines) or "-"
        tel = "; ".join(f"{n} {format_short(side_telemetry(run, n))}" for n in names)
        if proto == "interleaved":
            tel = format_short(side_telemetry(run, "*"))
        steady = (run.get("steady") or {}).get("outcome", "")
        out.append(f"{pre}{proto}: {ratios} | {tel}" + (f" | {steady}" if steady else ""))
    en = rec.get("energy") or {}
    if en.get("error"):
        out.append(f"{pre}energy: {en['error']}")
    elif en:
        sides = [(k, v) for k, v in en.items() if isinstance(v, dict) and "j_per_call" in v]
        parts = [f"{k} {v['j_per_call'] * 1e3:.4g} mJ/call" + (f" {v['j_per_tflop']:.3g} J/TFLOP" if v.get("j_per_tflop")
                                                                else "") for k, v in sides if v.get("j_per_call")]
        m = en.get("method") or {}
        bound = f", bound {m['bound']:.1%}" if m.get("bound") else ""
        out.append(f"{pre}energy (isolated windows of {m.get('window_s', 0):g} s{bound}): " + ", ".join(parts))
    return out


def energy_of(rec: dict[str, Any], name: str) -> float | None:
    v = (rec.get("energy") or {}).get(name)
    return v.get("j_per_call") if isinstance(v, dict) else None
