"""Realistic run-store contents for the report and fixit tests: real rows written through `Store`.

Payload shapes are the ones the stages write: the agent stores `EvalOutcome.to_payload()` in
`evaluations` (stage, reason, compile_errors, missing_features, flags, speedup, ...), the harness adds
`speedups` per baseline, `correctness` per size and `energy`; the verifier stores requested / found /
missing / executed features; search nodes carry the outcome and the change description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelpro.results.store import Store

TASKS = {
    "ptxbench/gemm_bf16": ["wgmma", "tma", "mbarrier"],
    "ptxbench/softmax_fp32": ["bulk_copy", "mbarrier"],
    "ptxbench/layernorm_bf16": ["tma", "mbarrier"],
    "ptxbench/attn_fwd_bf16": ["wgmma", "tma", "mbarrier", "setmaxnreg"],
}

KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
{body}
}}

torch::Tensor {name}_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
    {name}_kernel<<<(n + {block} - 1) / {block}, {block}>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""

cpp_src = "torch::Tensor {name}_cuda(torch::Tensor x);"

ext = load_inline(name="{name}_v{version}", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["{name}_cuda"], extra_cuda_cflags=["-O3", "-arch=sm_90a"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.{name}_cuda(x)
'''

BODIES = {
    "compile_error": "    if (i < n) y[i] = x[i] * scale_factor;  // scale_factor never declared",
    "wrong_output": "    if (i <= n) y[i] = x[i + 1];",
    "missing_feature": "    if (i < n) y[i] = __ldg(&x[i]);",
    "flagged": "    // returns the cached reference output\n    if (i < n) y[i] = y[i];",
    "slow": "    for (int k = 0; k < 64; ++k) if (i < n) y[i] = x[i];",
    "pass": ("    asm volatile(\"mbarrier.init.shared.b64 [%0], 1;\" :: \"r\"(0));\n"
             "    asm volatile(\"wgmma.fence.sync.aligned;\");\n    if (i < n) y[i] = x[i];"),
}


def kernel(task: str, verdict: str, version: int, block: int = 256) -> str:
    name = task.split("/")[-1]
    return KERNEL.format(name=name, body=BODIES[verdict], block=block, version=version)


def eval_payload(verdict: str, requested: list[str], speedup: float | None = None) -> dict[str, Any]:
    """An evaluation payload as the agent + harness store it."""
    p: dict[str, Any] = {"ok": verdict in ("pass", "slow"), "stage": "ok", "reason": "", "flags": [],
                         "compile_errors": "", "verify_errors": "", "missing_features": [], "correct": True,
                         "speedup": speedup, "timings": {}, "diagnoses": "", "energy_j": None,
                         "baseline_energy_j": None, "correct_with_arch": None, "record": {}, "recorded": False}
    if verdict == "compile_error":
        p.update(stage="compile", correct=None, speedup=None,
                 reason="identifier \"scale_factor\" is undefined",
                 compile_errors=("/tmp/kp/ext/cuda.cu(9): error: identifier \"scale_factor\" is undefined\n"
                                 "      if (i < n) y[i] = x[i] * scale_factor;\n"
                                 "                               ^\n1 error detected in the compilation of "
                                 "\"/tmp/kp/ext/cuda.cu\".\nninja: build stopped: subcommand failed."))
    elif verdict == "wrong_output":
        p.update(stage="correctness", correct=False, speedup=None,
                 reason="output mismatch at size M=4096: max abs err 3.1e+00 > atol 2e-02 (12.5% of elements)",
                 record={"correctness": [   # the harness's per-trial records, kept in the outcome
                     {"size": {"M": 512}, "which": "shown", "ok": True, "max_abs_err": 0.0},
                     {"size": {"M": 4096}, "which": "default", "ok": False, "max_abs_err": 3.1},
                     {"size": {"M": 1000}, "which": "heldout", "ok": False, "max_abs_err": 2.7}]})
        p["reason"] += "; also fails at M=1000"
    elif verdict == "missing_feature":
        missing = requested[:1]
        p.update(stage="verify", speedup=None, missing_features=missing,
                 verify_errors=f"requested features not found in PTX/SASS: {', '.join(missing)}",
                 reason=f"requested features not found: {', '.join(missing)}")
    elif verdict == "flagged":
        p.update(stage="gaming", flags=["output_reused_across_calls"], speedup=41.0,
                 reason="anti-gaming flags: output_reused_across_calls")
    elif verdict == "slow":
        p.update(diagnoses="memory-bound at 21% of DRAM bandwidth; loads are not coalesced: use 128-bit "
                           "vector loads and remove the redundant inner loop")
    if p["speedup"] is not None:
        # the harness record inside the outcome names each baseline's speedup
        p["record"] = {**p["record"], "speedup": {"cublas": p["speedup"], "eager": round(p["speedup"] * 1.3, 3)}}
        p["energy_j"], p["baseline_energy_j"] = 0.001 / p["speedup"], 0.001
    return p


def harness_payload(verdict: str, speedup: float | None) -> dict[str, Any]:
    """An evaluation record as kernelpro.harness.evaluate writes it (what `kernelpro bench` stores)."""
    failed = {"compile_error": ["compile_error"], "wrong_output": ["wrong_output"],
              "flagged": ["reads_reference_output"]}.get(verdict, [])
    trials = [{"which": "default", "size": {"M": 4096}, "ok": verdict != "wrong_output", "max_abs": 0.0,
               "rel_norm": 0.0, "order": "ref_first"}]
    p: dict[str, Any] = {"schema": 1, "candidate": "/tmp/kp/cand.py", "device": "cuda", "compiled": verdict != "compile_error", "correct": not failed,
                         "failed_checks": failed, "reason": failed[0] if failed else None,
                         "detail": "default: rel_norm 0.41 (tol 0.01)" if failed else "", "ok": not failed,
                         "correctness": trials if verdict != "compile_error" else []}
    if speedup is not None and not failed:
        p["speedup"] = {"eager": speedup * 1.3, "cublas": speedup}
        p["energy"] = {"candidate": {"j_per_call": 0.001 / speedup}, "eager": {"j_per_call": 0.0013},
                       "cublas": {"j_per_call": 0.001}, "caveats": "whole-board NVML counter"}
    return p


def verifier_payload(verdict: str, requested: list[str]) -> dict[str, Any]:
    """A verification record as kernelpro.static.verify's VerifyReport.to_dict writes it."""
    feats = {f: "emitted" for f in requested}
    if verdict == "missing_feature":
        feats[requested[0]] = "absent"
    return {"arch": "sm_90a", "requested": requested, "compiled": True, "features": feats,
            "passed": verdict != "missing_feature",
            "missing_features": [f for f, st in feats.items() if st != "emitted"], "diagnostics": []}


def verify_payload(verdict: str, requested: list[str]) -> dict[str, Any]:
    found = list(requested) if verdict not in ("missing_feature", "compile_error") else requested[1:]
    return {"requested": requested, "found": found, "missing": [f for f in requested if f not in found],
            "executed": found[:-1] if found else [], "arch": "sm_90a"}


def add(store: Store, run_id: int, task: str, verdict: str, version: int, parent: int | None = None,
        origin: str = "llm", speedup: float | None = None, info: dict[str, Any] | None = None,
        block: int = 256, verify: bool = True) -> int:
    req = TASKS[task]
    cid = store.add_candidate(run_id, task, kernel(task, verdict, version, block), "py", origin, parent, info or {})
    if verify and verdict != "compile_error":
        store.record("verifications", cid, verdict != "missing_feature", verify_payload(verdict, req), "sm_90a")
    store.record("evaluations", cid, verdict in ("pass", "slow"), eval_payload(verdict, req, speedup), "sm_90a")
    return cid


def optimize_run(store: Store, task: str, seed: int = 0) -> int:
    """One MCTS search: every failure kind, each repaired by a child; one repair by the model."""
    run = store.new_run("optimize", "ptxbench", {"task": task, "strategy": "mcts", "model": "local-test"})
    v = seed * 100
    nodes: list[tuple[str, str | None, int | None, str, dict]] = []

    def node(key: str, parent_key: str | None, cid: int | None, depth: int, what: str, stage: str,
             speedup: float | None, ok: bool) -> None:
        store.put_node(run, key, parent_key, cid, depth, 1, 0.5 if ok else 0.0, "open" if ok else "failed",
                       {"what": what, "outcome": {"ok": ok, "stage": stage, "speedup": speedup, "reason": ""}})
        nodes.append((key, parent_key, cid, stage, {}))

    ref = add(store, run, task, "pass", v + 0, origin="reference", speedup=1.0, block=128)
    node("n0", None, ref, 0, "reference", "ok", 1.0, True)
    c1 = add(store, run, task, "compile_error", v + 1, ref,
             info={"what": "vectorize loads", "reply": "I vectorized the loads.\n```python\n...\n```"})
    node("n1", "n0", c1, 1, "vectorize loads", "compile", None, False)
    c2 = add(store, run, task, "pass", v + 2, c1, speedup=1.3 + 0.1 * seed, block=256,
             info={"what": "declare the scale", "explanation":
                   "The kernel used `scale_factor` without declaring it, so nvcc stopped with an undefined "
                   "identifier. I removed the stray scaling, which the reference never applies."})
    node("n2", "n1", c2, 2, "declare the scale", "ok", 1.3 + 0.1 * seed, True)
    c3 = add(store, run, task, "wrong_output", v + 3, c2, info={"what": "shift the index"})
    node("n3", "n2", c3, 3, "shift the index", "correctness", None, False)
    c4 = add(store, run, task, "pass", v + 4, c3, speedup=1.6, block=512, info={
        "what": "fix bounds", "reply": "The guard was `i <= n` and the load read `x[i + 1]`: an off-by-one "
        "that read past the row. Both now use `i < n` and `x[i]`.\n\n```python\nclass ModelNew: ...\n```"})
    node("n4", "n3", c4, 4, "fix bounds", "ok", 1.6, True)
    c5 = add(store, run, task, "missing_feature", v + 5, c4, info={"what": "use __ldg"})
    node("n5", "n4", c5, 5, "use __ldg", "verify", None, False)
    c6 = add(store, run, task, "pass", v + 6, c5, speedup=1.7, block=1024, info={"what": "add mbarrier"})
    node("n6", "n5", c6, 6, "add mbarrier", "ok", 1.7, True)
    c7 = add(store, run, task, "slow", v + 7, ref, speedup=0.6, info={"what": "loop"})
    node("n7", "n0", c7, 1, "loop", "ok", 0.6, True)
    c8 = add(store, run, task, "pass", v + 8, c7, speedup=1.1, block=64, info={"what": "drop loop"})
    node("n8", "n7", c8, 2, "drop loop", "ok", 1.1, True)
    c9 = add(store, run, task, "flagged", v + 9, c6, info={"what": "cache"})
    node("n9", "n6", c9, 7, "cache", "gaming", 41.0, False)
    c10 = add(store, run, task, "pass", v + 10, c9, speedup=1.8, block=32, info={"what": "no cache"})
    node("n10", "n9", c10, 8, "no cache", "ok", 1.8, True)
    c11 = add(store, run, task, "compile_error", v + 11, c10, info={"what": "dead end"})
    node("n11", "n10", c11, 9, "dead end", "compile", None, False)
    store.put_node(run, "n12", "n11", None, 10, 0, 0.0, "pruned", {"what": "no reply", "outcome": None})
    store.set_run_status(run, "done")
    return run


def bench_run(store: Store, label: str = "with-hwdocs", scale: float = 1.0) -> int:
    run = store.new_run("bench", "ptxbench", {"label": label, "arch": "sm_90a"})
    verdicts = ["pass", "pass", "missing_feature", "slow"]
    for i, (task, verdict) in enumerate(zip(TASKS, verdicts, strict=True)):
        sp = {"pass": 1.4 * scale + 0.3 * i, "slow": 0.8 * scale, "missing_feature": 1.1}.get(verdict)
        cid = store.add_candidate(run, task, kernel(task, verdict, 900 + i + int(scale * 10)), "py", "user")
        store.record("verifications", cid, verdict != "missing_feature", verifier_payload(verdict, TASKS[task]),
                     "sm_90a")
        store.record("evaluations", cid, verdict != "missing_feature", harness_payload(verdict, sp), "sm_90a")
        if verdict == "pass":  # ncu's executed-instruction evidence, as the profiler stores it
            store.record("profiles", cid, True, {"executed": {"arch": "sm_90a", "executed_ok": True, "features": {
                f: {"families": [f], "executed": j < 2, "kernels": ["k"]} for j, f in enumerate(TASKS[task])}},
                "findings": [{"tool": "memory", "kernel": "k", "title": "DRAM-bound", "severity": "high",
                              "text": "84% of peak DRAM bandwidth", "actions": ["fuse the epilogue"]}]},
                "sm_90a")
    store.set_run_status(run, "done")
    return run


def multiturn_run(store: Store) -> int:
    """PTXBench-style multi-turn attempts without parent links: consecutive attempts in one run/task."""
    run = store.new_run("bench", "ptxbench", {"label": "multi-turn", "turns": 3})
    task = "ptxbench/softmax_fp32"
    add(store, run, task, "compile_error", 500, origin="llm")
    add(store, run, task, "wrong_output", 501, origin="llm")
    add(store, run, task, "pass", 502, origin="llm", speedup=1.2)
    store.set_run_status(run, "done")
    return run


def populated_store(path: Path) -> tuple[Store, dict[str, Any]]:
    store = Store(path)
    ids: dict[str, Any] = {"optimize": [optimize_run(store, t, seed=i) for i, t in enumerate(TASKS)]}
    # The same search repeated: identical code, so every example it yields is a duplicate.
    ids["repeat"] = optimize_run(store, "ptxbench/gemm_bf16", seed=0)
    ids["bench_a"] = bench_run(store, "with-hwdocs", 1.0)
    ids["bench_b"] = bench_run(store, "without-hwdocs", 0.7)
    ids["multiturn"] = multiturn_run(store)
    return store, ids
