"""The Hopper references for the memory-bound ptxbench tasks verify statically for sm_90a (no GPU needed).

1. ``kernelpro.static.verify`` on each reference file (the same path ``kernelpro verify --task`` takes: the
   candidate runs in a child process, its load_inline sources are captured and compiled for sm_90a, PTX
   and SASS are inspected): every feature the task requests is emitted by *every* kernel the file
   builds, with no spills or local memory. The transpose must also show the TMA store (UTMASTG) and
   the ldmatrix/stmatrix transpose; the row kernels must issue TMA loads and wait on mbarrier phases.
2. The host-side planning code (row-block shapes of the row pipeline, tile order of the transpose) is
   compiled with nvcc into a host program and run over the task's shown, held-out and default sizes plus
   edge cases; the test checks the invariants the kernels rely on (a team covers a row, blocks cover
   every row exactly once, TMA box limits, shared-memory budget, every tile visited exactly once).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
from pathlib import Path

import pytest

from kernelpro.static.verify import EMITTED, verify
from kernelpro.suites.task import find_task
from kernelpro.toolchain import find_tool

REF = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference"
TASKS = ["softmax_rows_bf16", "rmsnorm_bf16", "transpose_bf16"]


def _need_tools() -> None:
    if find_tool("nvcc") is None or find_tool("cuobjdump") is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump wheel)")


@pytest.mark.parametrize("name", TASKS)
def test_reference_emits_requested_features_without_spills(name):
    _need_tools()
    task = find_task(f"ptxbench/{name}")
    requested = list(task.requested_features("sm_90a"))
    assert requested, f"{name} requests no sm_90a features"
    report = verify(REF / f"{name}.py", "sm_90a", requested)
    assert report.compiled, report.compile_errors
    assert report.passed, report.summary
    # Two instantiations of the row kernel (4 and 8 vectors per thread), one transpose kernel.
    assert len(report.kernels) == (1 if name == "transpose_bf16" else 2), [k.name for k in report.kernels]
    for k in report.kernels:
        assert all(k.status[f] == EMITTED for f in requested), (k.name, k.status)
        assert (k.spill_stores, k.spill_loads, k.ldl, k.stl, k.stack_bytes) == (0, 0, 0, 0, 0), k
        sass = " ".join(op for ops in k.sass_features.values() for op in ops)
        assert "UTMALDG" in sass, (k.name, k.sass_features)
        if name == "transpose_bf16":
            assert "UTMASTG" in sass, k.sass_features  # the output goes out through a TMA store too
            assert "ldmatrix" in k.sass_features and "stmatrix" in k.sass_features, k.sass_features
        else:
            assert "mbarrier" in k.sass_features and k.registers is not None and k.registers <= 255


def _literal(path: Path, var: str) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == var:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} has no literal {var}")


def _all_sizes(name: str, extra: list[tuple[int, int]]) -> list[tuple[int, int]]:
    task = find_task(f"ptxbench/{name}")
    keys = [k for k in task.default_size if k != "EPS"]
    return [(s[keys[0]], s[keys[1]]) for s in task.sizes("all")] + extra


HOST_MAIN = r"""
#include <cstdio>
int main() {
  const long long rows_sizes[][2] = {ROW_SIZES};
  for (const auto& s : rows_sizes) {
    kpm::RowPlan p;
    const char* e = kpm::plan_rows(s[0], s[1], 132, &p);
    std::printf("plan %lld %lld %s %d %d %d %d %d %u %zu %d\n", s[0], s[1], e ? "ERR" : "OK", p.V, p.team_warps, p.R,
                p.nch, p.nblocks, p.stage_bytes, p.smem, kpm::row_vectors(s[1]));
  }
  const int tile_sizes[][2] = {TILE_SIZES};
  for (const auto& s : tile_sizes) {
    const int ntr = (s[0] + 63) / 64, ntc = (s[1] + 63) / 64;
    static unsigned char seen[1 << 22];
    for (int i = 0; i < ntr * ntc; ++i) seen[i] = 0;
    int bad = 0;
    for (int t = 0; t < ntr * ntc; ++t) {
      int tr, tc;
      kpm::tile_coords(t, ntr, ntc, tr, tc);
      if (tr < 0 || tr >= ntr || tc < 0 || tc >= ntc || seen[tr * ntc + tc]++) ++bad;
    }
    std::printf("tiles %d %d %d\n", s[0], s[1], bad);
  }
  return 0;
}
"""


def test_host_planning_covers_every_row_and_tile(tmp_path):
    _need_tools()
    spec = importlib.util.spec_from_file_location("kp_memops_common_test", REF / "_memops_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    row_sizes = sorted(set(_all_sizes("softmax_rows_bf16", []) + _all_sizes("rmsnorm_bf16", [])
                           + [(1, 8), (3, 264), (100000, 8), (777, 16384), (5000, 520), (257, 2056), (9, 8200)]))
    bad_rows = [(4, 12), (4, 16392)]  # not a multiple of 8; longer than the kernel supports
    tile_sizes = sorted(set(_all_sizes("transpose_bf16", [(8, 8), (72, 136), (4104, 8), (8, 4104), (520, 1000)])))
    main = (HOST_MAIN.replace("ROW_SIZES", ", ".join(f"{{{r}, {c}}}" for r, c in row_sizes + bad_rows))
            .replace("TILE_SIZES", ", ".join(f"{{{r}, {c}}}" for r, c in tile_sizes)))
    src = tmp_path / "plan.cu"
    src.write_text(common.CUDA_PRELUDE + _literal(REF / "transpose_bf16.py", "CUDA_SRC") + main)
    exe = tmp_path / "plan"
    build = subprocess.run([str(find_tool("nvcc")), *common.NVCC_FLAGS, str(src), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    plans = [ln.split() for ln in run.stdout.splitlines() if ln.startswith("plan ")]
    assert len(plans) == len(row_sizes) + len(bad_rows)
    for f in plans:
        rows, cols, status = int(f[1]), int(f[2]), f[3]
        if (rows, cols) in bad_rows:
            assert status == "ERR", f
            continue
        assert status == "OK", f
        v, tw, r, nch, nblocks, stage, smem, want_v = (int(x) for x in f[4:])
        assert v == want_v  # the op the launcher instantiates matches the plan
        assert tw in (1, 2, 4, 8) and 8 * v * 32 * tw >= cols, f  # one team holds a row in registers
        assert r % (8 // tw) == 0 and 1 <= r <= 256, f  # whole rows per team; TMA box limit
        assert (nblocks - 1) * r < rows <= nblocks * r, f  # every row in exactly one block
        assert (nch - 1) * 256 < cols <= nch * 256, f  # 256-column boxes cover the row
        assert stage == nch * r * 512 and stage < (1 << 20), f  # expect_tx bytes = boxes delivered
        assert smem == 3 * stage + 1024 and smem <= 3 * 32768 + 1024, f
        if rows >= 132 * (8 // tw):  # enough rows: every SM gets a block
            assert nblocks >= 132, f
    tiles = [ln.split() for ln in run.stdout.splitlines() if ln.startswith("tiles ")]
    assert len(tiles) == len(tile_sizes) and all(t[3] == "0" for t in tiles), tiles
