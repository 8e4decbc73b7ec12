"""Stage one: place each kernel on the roofline and decide which stage-two tools run.

Ceilings are the H200 figures measured on this project's machine (docs/measurements; KINDS.md): dense
bf16 GEMM through cuBLAS ~780 TFLOP/s, device copy 4.2 TB/s (read + write), plain fp32 FFMA ~60 TFLOP/s
(datasheet 67). Classes:

- latency-launch-bound: the launch is so short (< 8 us) that launch latency and ramp-up dominate;
- memory-bound / compute-bound: the side of the ridge the kernel sits on (arithmetic intensity vs the
  ridge point), or whichever of ncu's SOL throughputs is the bottleneck when one is >= 60 %;
- under-occupied: neither side is busy and too few warps are resident (achieved occupancy < 25 %, or the
  grid is smaller than one wave) to hide latency.

A kernel within 75 % of its ceiling is `near_ceiling`: only tools that point at a different, higher
ceiling (tensor cores) or at task compliance (requested TMA/async copies) still run for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelpro.hardware import MEASURED
from kernelpro.profile.collect import KernelProfile

TENSOR_OPCODES = ("HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA", "QMMA", "UTCHMMA", "UTCQMMA", "UTCMMA")


@dataclass(frozen=True)
class Ceilings:
    """The roofline's view of `kernelpro.hardware.MEASURED`, in the units the advice prints."""
    name: str = MEASURED.name
    bf16_tensor_tflops: float = MEASURED.tensor_flops["bf16"] / 1e12
    fp32_tflops: float = MEASURED.fp32_flops / 1e12
    copy_tbps: float = MEASURED.bandwidth / 1e12
    sms: int = MEASURED.sms


H200 = Ceilings()


@dataclass
class Roofline:
    kernel: str
    klass: str                       # memory-bound | compute-bound | latency-launch-bound | under-occupied
    side: str                        # memory | compute: which side of the ridge
    near_ceiling: bool
    duration_us: float
    flops: float
    dram_bytes: float
    tflops: float
    tbps: float
    intensity: float                 # FLOP per DRAM byte
    ridge: float
    pct_of_compute_ceiling: float
    pct_of_memory_ceiling: float
    uses_tensor_cores: bool
    reasons: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)


def counted_flops(p: KernelProfile) -> float:
    """FLOPs from ncu's per-thread FP instruction counters (FMA = 2)."""
    f = 0.0
    for prec in ("f", "h", "d"):
        f += 2 * (p.value(f"sm__sass_thread_inst_executed_op_{prec}fma_pred_on.sum") or 0)
        f += p.value(f"sm__sass_thread_inst_executed_op_{prec}add_pred_on.sum") or 0
        f += p.value(f"sm__sass_thread_inst_executed_op_{prec}mul_pred_on.sum") or 0
    return f


def tensor_instructions(p: KernelProfile) -> float:
    ops = p.instances.get("sass__inst_executed_per_opcode", {})
    if ops:
        # The opcode table is exact. The tensor-pipe counters are not a fallback here: they also count
        # the compiler's HFMA2.MMA register moves (528 on the recorded streaming sum, which has no MMA).
        return sum(v for op, v in ops.items() if op.split(".")[0] in TENSOR_OPCODES)
    return p.sum("sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum") or 0


MEMORY_SOL = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
# Where ncu's memory SOL comes from, by unit prefix: DRAM, L2 (and the crossbar into it), L1/shared.
MEMORY_UNITS = (("dram__", "DRAM"), ("fbpa__", "DRAM"), ("lts__xbar2lts", "the crossbar into L2"),
                ("lts__d_atomic", "L2's atomic unit"), ("lts__", "L2"), ("l1tex__", "L1/shared memory"))


def memory_limiter(p: KernelProfile) -> tuple[str, str, float] | None:
    """The sub-metric of ncu's memory SOL breakdown that sets it: (metric, unit, percent)."""
    names = p.metrics.get("breakdown:" + MEMORY_SOL)
    if not names or not isinstance(names[0], str):
        return None
    best = max(((n, p.value(n)) for n in names[0].split(",") if p.value(n) is not None),
               key=lambda nv: nv[1], default=None)
    if best is None:
        return None
    unit = next((u for prefix, u in MEMORY_UNITS if best[0].startswith(prefix)), "memory")
    return best[0], unit, best[1]


def classify(p: KernelProfile, ceilings: Ceilings = H200, task_flops: float | None = None) -> Roofline:
    """`task_flops`: the task's declared FLOPs attributed to this launch (tensor-core work is not in
    ncu's FP counters); used when larger than what the counters show."""
    dur_us = (p.duration_ns or 0) / 1e3
    dram = p.sum("dram__bytes_read.sum", "dram__bytes_write.sum") or 0.0
    flops = max(counted_flops(p), task_flops or 0.0)
    tensor = tensor_instructions(p) > 0
    peak_tflops = ceilings.bf16_tensor_tflops if tensor else ceilings.fp32_tflops
    secs = max(dur_us, 1e-3) * 1e-6
    tflops, tbps = flops / secs / 1e12, dram / secs / 1e12
    ridge = peak_tflops / ceilings.copy_tbps
    intensity = flops / dram if dram else float("inf")
    pct_c, pct_m = 100 * tflops / peak_tflops, 100 * tbps / ceilings.copy_tbps
    sol_sm = p.value("sm__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0
    sol_mem = p.value("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed") or 0.0
    achieved = p.value("sm__warps_active.avg.pct_of_peak_sustained_active")
    waves = p.value("launch__waves_per_multiprocessor")
    side = "memory" if intensity < ridge else "compute"
    reasons = [f"{tflops:.2f} TFLOP/s ({pct_c:.0f}% of {peak_tflops:.0f}), {tbps:.2f} TB/s "
               f"({pct_m:.0f}% of {ceilings.copy_tbps}), intensity {intensity:.1f} FLOP/B vs ridge {ridge:.0f}"]
    near = max(pct_c, pct_m) >= 75
    if dur_us and dur_us < 8:
        klass = "latency-launch-bound"
        reasons.append(f"one launch runs {dur_us:.1f} us, comparable to launch latency")
    elif max(sol_sm, sol_mem, pct_c, pct_m) >= 60:
        mem_side = max(sol_mem, pct_m)
        comp_side = max(sol_sm, pct_c)
        klass = "memory-bound" if mem_side >= comp_side else "compute-bound"
        reasons.append(f"SOL: SM {sol_sm:.0f}%, memory {sol_mem:.0f}%")
        lim = memory_limiter(p) if klass == "memory-bound" and sol_mem > pct_m else None
        if lim and lim[1] != "DRAM":
            # Above the ridge and still memory-bound: an on-chip unit, not DRAM, is the wall.
            reasons.append(f"memory SOL set by {lim[1]} ({lim[0].split('.')[0]} {lim[2]:.0f}%), DRAM at {pct_m:.0f}%")
    elif (achieved is not None and achieved < 25) or (waves is not None and waves < 0.5):
        klass = "under-occupied"
        reasons.append(f"achieved occupancy {achieved if achieved is not None else float('nan'):.0f}%, "
                       f"waves {waves if waves is not None else float('nan'):.2f}")
    else:
        klass = f"{side}-bound"
        reasons.append(f"far from both ceilings (SOL: SM {sol_sm:.0f}%, memory {sol_mem:.0f}%)")
    r = Roofline(p.name, klass, side, near, dur_us, flops, dram, tflops, tbps, intensity, ridge, pct_c, pct_m,
                 tensor, reasons)
    r.tools = select_tools(r)
    return r


# Which tools each class calls for. Compliance tools (requested TMA) and the tensor-core check (a
# different, ~13x higher ceiling) run for every class, near the ceiling too.
ALWAYS = ("tensor_core", "tma")
BY_CLASS = {
    "memory-bound": ("atomics", "coalescing", "dram_bandwidth", "bank_conflicts", "spills", "occupancy", "warp_stalls",
                     "tail_effect"),
    "compute-bound": ("bank_conflicts", "spills", "occupancy", "warp_stalls", "tail_effect"),
    "latency-launch-bound": ("launch_overhead", "occupancy"),
    "under-occupied": ("atomics", "occupancy", "tail_effect", "launch_overhead", "dram_bandwidth", "coalescing", "spills",
                       "warp_stalls"),
}


def select_tools(r: Roofline) -> list[str]:
    if r.near_ceiling:
        return list(ALWAYS)
    return list(dict.fromkeys(BY_CLASS[r.klass] + ALWAYS))
