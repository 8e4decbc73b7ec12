"""CPU emulation of the scheduler and index math of ``hopper_grouped_gemm.cu`` (no GPU).

The kernel's scheduler helpers (``build_schedule``, ``find_expert``, ``work_tile``, ``row_live``,
``col_live``, ``max_work``) are ``__host__ __device__``: a host program that includes the .cu with
``KP_GROUPED_HELPERS_ONLY`` (real nvcc build) tabulates them for uneven and empty groups, and the tests
compare the tables with a Python model written independently here: every work index maps to the expert,
m-tile and n-tile the model says, empty groups own no work, the live rows and columns of all work items
cover each (row, col) of Y exactly once and never a row of another expert, and the grid bound covers the
work. Then the GEMM is emulated through the tables as the kernel composes them (a tile reads BM rows of X
from its group's start, past the group's end into the next expert's rows, zero past T; BN rows of W viewed
as (E*N, K), zero past E*N; the epilogue stores only live elements) and compared with a per-expert torch
loop. What it cannot catch: the TMA/wgmma data path itself (descriptors, swizzle, barriers); the GPU recipe
docs/measurements/recipes/gpu_moe_ref.py checks that.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from kernelpro.toolchain import find_tool

CU = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference" / "hopper_grouped_gemm.cu"

HOST_PROGRAM = r"""
#include "hopper_grouped_gemm.cu"
#include <cstdio>
#include <vector>
using namespace kp_grouped;
int main() {
  int experts, n, bm, bn, tokens;
  while (scanf("%d %d %d %d %d", &experts, &n, &bm, &bn, &tokens) == 5) {
    std::vector<int> offs(experts), prefix(experts + 1), starts(experts);
    for (int e = 0; e < experts; ++e) scanf("%d", &offs[e]);
    const int tiles_n = (n + bn - 1) / bn;
    const int total = build_schedule(offs.data(), experts, bm, tiles_n, prefix.data(), starts.data());
    printf("case %d %d\n", total, max_work(tokens, experts, bm, tiles_n));
    printf("prefix");
    for (int e = 0; e <= experts; ++e) printf(" %d", prefix[e]);
    printf("\nstarts");
    for (int e = 0; e < experts; ++e) printf(" %d", starts[e]);
    printf("\n");
    for (int t = 0; t < total; ++t) {
      int e, mt, nt;
      work_tile(prefix.data(), offs.data(), experts, bm, t, e, mt, nt);
      printf("work %d %d %d %d ", t, e, mt, nt);
      for (int r = 0; r < bm; ++r) putchar(row_live(starts[e], offs[e], bm, mt, r) ? '1' : '0');
      putchar(' ');
      for (int c = 0; c < bn; ++c) putchar(col_live(n, bn, nt, c) ? '1' : '0');
      putchar('\n');
    }
    printf("end\n");
  }
  return 0;
}
"""

# (group sizes, N, BM, BN): uneven multiples of 8, not of BM; empty groups first, inside, last and in runs;
# a single expert; N not a multiple of BN; the shipped tile (128 x 256) and smaller ones.
CASES = [
    ([40, 0, 8, 96, 16], 72, 32, 32),
    ([0, 0, 24, 56, 0], 40, 16, 32),
    ([8, 8, 0], 64, 64, 64),
    ([104], 48, 32, 16),
    ([0, 200, 0, 0, 136, 8], 96, 64, 64),
    ([1368, 2736, 4096, 1368, 2736, 4096, 1368, 16], 776, 128, 256),   # the task's group_sizes() shape
]


def _host_tables(tmp_path: Path) -> list[dict]:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc to build the kernel's scheduler helpers")
    src = tmp_path / "sched.cu"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "sched"
    cmd = [str(nvcc), "-std=c++17", "-DKP_GROUPED_HELPERS_ONLY", f"-I{CU.parent}", str(src), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    stdin = ""
    for sizes, n, bm, bn in CASES:
        ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        stdin += f"{len(sizes)} {n} {bm} {bn} {sum(sizes)}\n{' '.join(map(str, ends))}\n"
    run = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out, cur = [], None
    for line in run.stdout.splitlines():
        f = line.split()
        if f[0] == "case":
            cur = {"total": int(f[1]), "max_work": int(f[2]), "work": []}
        elif f[0] == "prefix":
            cur["prefix"] = list(map(int, f[1:]))
        elif f[0] == "starts":
            cur["starts"] = list(map(int, f[1:]))
        elif f[0] == "work":
            cur["work"].append((int(f[2]), int(f[3]), int(f[4]), [c == "1" for c in f[5]], [c == "1" for c in f[6]]))
        elif f[0] == "end":
            out.append(cur)
    assert len(out) == len(CASES)
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return _host_tables(tmp_path_factory.mktemp("grouped_sched"))


def _model(sizes: list[int], n: int, bm: int, bn: int) -> list[tuple[int, int, int]]:
    """The work items in linear order: per expert, m-tiles fastest, then n-tiles; empty experts none."""
    tiles_n = -(-n // bn)
    items = []
    for e, s in enumerate(sizes):
        tiles_m = -(-s // bm)
        items += [(e, mt, nt) for nt in range(tiles_n) for mt in range(tiles_m)]
    return items


@pytest.mark.parametrize("case", range(len(CASES)))
def test_work_index_maps_to_expert_and_tile(tables, case):
    sizes, n, bm, bn = CASES[case]
    got = tables[case]
    want = _model(sizes, n, bm, bn)
    assert got["total"] == len(want)
    assert [(e, mt, nt) for e, mt, nt, _, _ in got["work"]] == want
    assert got["starts"] == [sum(sizes[:e]) for e in range(len(sizes))]
    assert got["prefix"][-1] == len(want) and got["prefix"] == sorted(got["prefix"])
    assert all(sizes[e] > 0 for e, _, _, _, _ in got["work"])        # empty groups own no work
    assert len(want) <= got["max_work"]                              # the grid bound covers all work


@pytest.mark.parametrize("case", range(len(CASES)))
def test_live_rows_and_columns_cover_y_exactly_once(tables, case):
    sizes, n, bm, bn = CASES[case]
    got = tables[case]
    tokens = sum(sizes)
    cover = torch.zeros(tokens, n, dtype=torch.int32)
    for e, mt, nt, rows, cols in got["work"]:
        start, end = got["starts"][e], got["starts"][e] + sizes[e]
        r_idx = [start + mt * bm + r for r in range(bm) if rows[r]]
        c_idx = [nt * bn + c for c in range(bn) if cols[c]]
        assert r_idx and c_idx, "a work item with nothing to store"
        assert all(start <= r < end for r in r_idx)                   # never a row of another expert
        assert all(c < n for c in c_idx)
        # the mask is exactly "inside the group / below N"
        assert rows == [start + mt * bm + r < end for r in range(bm)]
        assert cols == [nt * bn + c < n for c in range(bn)]
        cover[torch.tensor(r_idx)[:, None], torch.tensor(c_idx)[None, :]] += 1
    assert bool((cover == 1).all())


@pytest.mark.parametrize("case", [0, 1, 2, 4])
def test_emulated_gemm_through_the_tables_matches_torch(tables, case):
    sizes, n, bm, bn = CASES[case]
    got = tables[case]
    k, experts, tokens = 40, len(sizes), sum(sizes)
    g = torch.Generator().manual_seed(case)
    x = torch.randn(tokens, k, generator=g)
    w = torch.randn(experts, n, k, generator=g)
    w_flat = w.reshape(experts * n, k)
    y = torch.full((tokens, n), float("nan"))
    for e, mt, nt, rows, cols in got["work"]:
        m0, w0 = got["starts"][e] + mt * bm, e * n + nt * bn
        # what the TMA boxes hold: BM rows of X from m0 (zero past T), BN rows of W from w0 (zero past E*N)
        a = torch.zeros(bm, k)
        a[: max(0, min(bm, tokens - m0))] = x[m0: m0 + bm]
        b = torch.zeros(bn, k)
        b[: max(0, min(bn, experts * n - w0))] = w_flat[w0: w0 + bn]
        acc = a @ b.t()
        for r in range(bm):
            if rows[r]:
                for c in range(bn):
                    if cols[c]:
                        y[m0 + r, nt * bn + c] = acc[r, c]
    ref = torch.empty(tokens, n)
    start = 0
    for e, s in enumerate(sizes):
        ref[start: start + s] = x[start: start + s] @ w[e].t()
        start += s
    assert not torch.isnan(y).any()
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-4)
