"""How a timing was taken, as text: protocol, ratio, clocks, power and energy, read from a stored result
record (plain dicts, as `kernelpro.harness.telemetry` and `timing` write them).

`bench`, `compare` and the report call these, so they live here at the bottom of the stack; nothing
here draws a table, so each caller keeps its own layout. A record written before telemetry existed
gives '-'.
"""

from __future__ import annotations

from typing import Any

_SHORT = {"sw_power_cap": "pwrcap", "sw_thermal": "thermal", "hw_thermal": "hwthermal", "hw_slowdown": "hwslow",
          "hw_power_brake": "brake"}


def format_short(t: dict[str, Any] | None) -> str:
    """A compact cell: '1485 MHz 691 W 63C pwrcap' (median SM clock, power, temperature, main reasons)."""
    if not t:
        return "-"
    if not t.get("available"):
        return "no telemetry"
    parts = [f"{t['sm_mhz']['median']:.0f} MHz" if t.get("sm_mhz") else "",
             f"{t['power_w']['median']:.0f} W" if t.get("power_w") else "",
             f"{t['temp_c']['median']:.0f}C" if t.get("temp_c") else ""]
    parts += [_SHORT.get(k, k) for k, v in (t.get("throttle") or {}).items() if v >= 0.5 and k != "gpu_idle"]
    return " ".join(p for p in parts if p)


def format_line(t: dict[str, Any] | None) -> str:
    """One line with ranges: 'SM 1455 MHz [1410-1485], mem 2619 MHz [..], power 693 W [680-699] of 700 W cap, ...'."""
    if not t:
        return "telemetry: not recorded"
    if not t.get("available"):
        return f"telemetry: unavailable ({t.get('reason')})"

    def rng(s: dict[str, float] | None, unit: str) -> str:
        return "-" if not s else f"{s['median']:.0f} {unit} [{s['min']:.0f}-{s['max']:.0f}]"

    cap = f" of {t['power_limit_w']:.0f} W cap" if t.get("power_limit_w") else ""
    thr = ", ".join(f"{k} {v:.0%}" for k, v in (t.get("throttle") or {}).items()) or "none"
    e = f", {t['energy_j']:.1f} J" if t.get("energy_j") is not None else ""
    return (f"SM {rng(t.get('sm_mhz'), 'MHz')}, mem {rng(t.get('mem_mhz'), 'MHz')}, power "
            f"{rng(t.get('power_w'), 'W')}{cap}, temp {rng(t.get('temp_c'), 'C')}, throttle: {thr}; "
            f"{t.get('samples', 0)} samples over {t.get('seconds', 0):.2f} s{e}"
            + (f" ({t['reason']})" if t.get("reason") else ""))


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
