"""Record the planted-bottleneck corpus on the GPU and check every tool against its plant.

Run on the GPU machine from the repo root:  bash docs/measurements/recipes/gpu_profile_record.sh
Writes under $OUT (default ./ncu_out): ncu_recordings.tar.gz with one JSON (KernelProfile records, ptxas
report, ncu info) and one raw CSV per corpus kernel, the executed-opcode run of the wgmma kernel, the
end-to-end `kernelpro profile` JSON of a Python candidate, and ncu's metric list. Prints a table:
kernel, expected finding, findings, ok.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from kernelpro.profile import analyze  # noqa: E402
from kernelpro.profile.collect import Target, build_cu, run_ncu, save_profiles  # noqa: E402
from kernelpro.profile.executed import evidence_payload, executed_ok, executed_opcodes  # noqa: E402
from kernelpro.profile.tools.spills import parse_ptxas_verbose  # noqa: E402
from kernelpro.toolchain import require_tool  # noqa: E402

CORPUS = ROOT / "tests" / "kernels" / "profile"
ALL = "*"
# name -> (tools that must flag it, tools that must not (ALL: none may), requested features, dtype, launches)
PLANTS = {
    "clean_copy": ((), ALL, (), None, 1),
    "uncoalesced": (("coalescing",), (), (), None, 1),
    "bank_conflict": (("bank_conflicts",), (), (), None, 1),
    "spills": (("spills",), (), (), None, 1),
    "low_occupancy": (("occupancy",), (), (), None, 1),
    "ffma_matmul": (("tensor_core", "tma"), (), ("wgmma", "tma"), "bf16", 1),
    "tiny_launches": (("launch_overhead",), (), (), None, 3),
    "far_from_bw": (("dram_bandwidth",), (), (), None, 1),
    "tail_effect": (("tail_effect",), (), (), None, 1),
    "barrier_stall": (("warp_stalls",), (), (), None, 1),
    "wgmma_bulk": ((), ("tma", "tensor_core"), ("wgmma", "bulk_copy", "mbarrier"), "bf16", 1),
}
DEADLINE = time.time() + float(os.environ.get("KP_BUDGET_S", "205"))


def left() -> float:
    return DEADLINE - time.time()


def main() -> int:
    out = Path(os.environ.get("OUT", "ncu_out"))
    rec = Path("/tmp/kp_rec")
    work = Path("/tmp/kp_work")
    for d in (out, rec, work):
        d.mkdir(parents=True, exist_ok=True)
    ncu = require_tool("ncu")
    meta = {"ncu": str(ncu), "ncu_version": subprocess.run([str(ncu), "--version"], capture_output=True, text=True).stdout.strip(),
            "gpu": subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                                  capture_output=True, text=True).stdout.strip(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    print(json.dumps(meta), flush=True)

    t0 = time.time()
    with ThreadPoolExecutor(16) as ex:
        built = dict(zip(PLANTS, ex.map(lambda n: _build(CORPUS / f"{n}.cu", work), PLANTS), strict=True))
    print(f"built {sum(1 for b in built.values() if isinstance(b, tuple))}/{len(PLANTS)} in {time.time() - t0:.0f} s", flush=True)

    rows = []
    for name, (expect, forbid, requested, dtype, count) in PLANTS.items():
        b = built[name]
        if not isinstance(b, tuple):
            rows.append((name, expect, f"BUILD FAILED: {b}", False))
            continue
        if left() < 25:
            rows.append((name, expect, "skipped: out of time", False))
            continue
        exe, log = b
        t = time.time()
        try:
            profiles, info = run_ncu(Target([str(exe)], launch_skip=1, launch_count=count), work / f"{name}.ncu-rep",
                                     timeout=min(90, left() - 10))
        except Exception as e:  # noqa: BLE001 - one kernel failing must not lose the others
            rows.append((name, expect, f"NCU FAILED: {str(e)[:200]}", False))
            continue
        resources = parse_ptxas_verbose(log)
        (rec / f"{name}.csv").write_text(info["csv"])
        save_profiles(profiles, rec / f"{name}.json",
                      {"ptxas": resources, "requested": list(requested), "dtype": dtype, "expect": list(expect),
                       "dropped": info["dropped"], "reader": info["reader"], "cmd": info["cmd"], **meta})
        a = analyze(profiles, requested=requested, dtype=dtype, resources=resources)
        tools = sorted({f.tool for f in a.findings})
        ok = all(t in tools for t in expect) and not (tools if forbid == ALL else set(forbid) & set(tools))
        klass = ",".join(sorted({r.klass for r in a.rooflines}))
        rows.append((name, expect, f"{klass}: {tools} [{time.time() - t:.0f}s, {info['reader']}, dropped={info['dropped']}]", ok))
        print(f"--- {name}", *[f"  {r.reasons}" for r in a.rooflines[:1]], a.text("advice"), sep="\n", flush=True)

    if left() > 25:  # executed-instruction evidence on the wgmma kernel (correct_with_arch's third leg)
        try:
            exe = built["wgmma_bulk"][0]
            profiles, by_kernel = executed_opcodes(Target([str(exe)], launch_skip=1, launch_count=1),
                                                   export=work / "opcodes.ncu-rep", timeout=min(60, left() - 10))
            feats = ("wgmma", "bulk_copy", "mbarrier")
            ev = evidence_payload(profiles, feats, "sm_90a")
            save_profiles(profiles, rec / "wgmma_bulk_opcodes.json", {"evidence": ev, **meta})
            ok = executed_ok(profiles, feats) and not executed_ok(profiles, ("tma",))
            rows.append(("wgmma_bulk opcodes", "HGMMA,UBLKCP,SYNCS>0; UTMALDG=0",
                         json.dumps({f: e["executed"] for f, e in ev["features"].items()}), ok))
        except Exception as e:  # noqa: BLE001
            rows.append(("wgmma_bulk opcodes", "executed", f"FAILED: {str(e)[:200]}", False))

    if left() > 40:  # end to end through the CLI: Python candidate, ncu + PyTorch profiler + store
        cmd = [sys.executable, "-m", "kernelpro", "profile", str(CORPUS / "cand_chunked.py"), "--task",
               str(CORPUS / "task_chunked_scale.py"), "--json", "--db", str(work / "runs.db"), "--calls", "1",
               "--max-kernels", "6"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=left() - 15,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
            (rec / "e2e_cand_chunked.json").write_text(r.stdout)
            (rec / "e2e_cand_chunked.stderr").write_text(r.stderr[-20000:])
            d = json.loads(r.stdout) if r.returncode == 0 else {}
            tools = sorted({f["tool"] for f in d.get("findings", [])})
            rows.append(("e2e cand_chunked.py", "launch_overhead", f"rc={r.returncode} {tools} sys={d.get('system')}"
                         if r.returncode == 0 else f"rc={r.returncode} {r.stderr.strip()[-300:]}", "launch_overhead" in tools))
        except Exception as e:  # noqa: BLE001
            rows.append(("e2e cand_chunked.py", "launch_overhead", f"FAILED: {str(e)[:200]}", False))

    if left() > 15:
        q = subprocess.run([str(ncu), "--query-metrics"], capture_output=True, text=True, timeout=min(30, left() - 5))
        (rec / "ncu_query_metrics.txt").write_text(q.stdout)

    print("\nkernel | expected | findings | ok")
    for name, expect, got, ok in rows:
        print(f"{name} | {expect} | {got} | {'ok' if ok else 'FAIL'}")
    with tarfile.open(out / "ncu_recordings.tar.gz", "w:gz") as tar:
        for f in sorted(rec.iterdir()):
            tar.add(f, arcname=f"ncu/{f.name}")
    print(f"wrote {out / 'ncu_recordings.tar.gz'} ({(out / 'ncu_recordings.tar.gz').stat().st_size / 1e6:.1f} MB); "
          f"{sum(ok for *_, ok in rows)}/{len(rows)} ok; {time.time() - (DEADLINE - float(os.environ.get('KP_BUDGET_S', '215'))):.0f} s")
    return 0 if all(ok for *_, ok in rows) else 1


def _build(src: Path, work: Path):
    try:
        return build_cu(src, work)
    except Exception as e:  # noqa: BLE001
        return str(e)[:200]


if __name__ == "__main__":
    sys.exit(main())
