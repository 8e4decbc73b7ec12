"""CPU emulation of the index math of ``hopper_gemm_fp8.cu`` (no GPU).

The kernel's index helpers (``tile_coords``, ``acc_row``, ``acc_col``, ``window_first``, ``window_last``) are
``__host__ __device__``: a host program that includes the .cu (real nvcc build, one per parameter set, since
GROUP_M, PROMOTE_EVERY and BN are compile-time) tabulates them, and the tests check the tables against what
the kernel needs: the raster order visits every output tile exactly once and keeps GROUP_M super-rows
together; the m64 x BN wgmma fragment is covered exactly once by the 128 threads of a warpgroup in the
layout the PTX ISA gives for wgmma's fp32 accumulator; the promotion windows count every k-block exactly
once, start the wgmma accumulator from zero at each window's first block, never let it hold more than
PROMOTE_EVERY blocks, and, driven through the consumer loop's stage releases, free every ring stage
exactly once and only after its wgmma group has completed. Then the GEMM is emulated through the tables
as the kernel composes them (TMA boxes zero-filled past M, N and K, the promoted sum, the per-tensor scales,
the masked epilogue) on ragged shapes and compared with torch. What it cannot catch: the TMA/wgmma data
path itself (descriptors, swizzle, barriers), which needs a GPU.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from kernelpro.toolchain import find_tool

CU = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference" / "hopper_gemm_fp8.cu"

HOST_PROGRAM = r"""
#include "hopper_gemm_fp8.cu"
#include <cstdio>
using namespace kp_gemm_fp8;
int main() {
  printf("params %d %d %d %d %d %d %d %d\n", BM, BN, BK, CONSUMERS, CLUSTER_M, GROUP_M, PROMOTE_EVERY, kAccPerTile);
  printf("acc");
  for (int tid = 0; tid < 128; ++tid)
    for (int i = 0; i < kAccPerTile; ++i) printf(" %d,%d", acc_row(tid, i), acc_col(tid, i));
  printf("\n");
  char what[16];
  int a, b;
  while (scanf("%15s %d %d", what, &a, &b) == 3) {
    if (what[0] == 't') {          // tiles tiles_m tiles_n: the (tm, tn) of every linear tile index
      printf("tiles %d %d", a, b);
      for (int t = 0; t < a * b; ++t) {
        int tm, tn;
        tile_coords(t, a, b, tm, tn);
        printf(" %d,%d", tm, tn);
      }
    } else {                       // window k_tiles 0: window_first / window_last of every k-block
      printf("window %d", a);
      for (int kt = 0; kt < a; ++kt) printf(" %d%d", window_first(kt) ? 1 : 0, window_last(kt, a) ? 1 : 0);
    }
    printf("\n");
  }
  return 0;
}
"""

# Compile-time parameter sets: the shipped defaults, a non-power-of-two window and raster group, no
# promotion at all, and a cluster of two (tile_coords then orders super-tiles of CLUSTER_M*BM rows).
DEFAULTS = {"BM": 128, "BN": 192, "BK": 128, "CONSUMERS": 2, "CLUSTER_M": 1, "GROUP_M": 8, "PROMOTE_EVERY": 4}
BUILDS = {
    "shipped": {},
    "odd": {"BN": 128, "GROUP_M": 3, "PROMOTE_EVERY": 3},
    "no_promotion": {"BN": 256, "GROUP_M": 1, "PROMOTE_EVERY": 0, "STAGES": 4},
    "cluster": {"BN": 64, "CLUSTER_M": 2, "GROUP_M": 5, "PROMOTE_EVERY": 1, "BK": 256, "STAGES": 3},
}
TILE_GRIDS = [(1, 1), (1, 7), (7, 1), (3, 5), (8, 8), (9, 4), (17, 11), (64, 43)]
K_TILES = list(range(1, 26))
# (M, N, K) for the emulated GEMM: ragged in every dimension (K a multiple of 16 only, as the call requires).
SHAPES = [(200, 300, 272), (130, 71, 16), (64, 193, 400), (520, 130, 1040)]


def _params(name: str) -> dict:
    return {**DEFAULTS, **{k: v for k, v in BUILDS[name].items() if k in DEFAULTS}}


def _grid(p: dict, m: int, n: int) -> tuple[int, int]:
    return -(-m // (p["CLUSTER_M"] * p["BM"])), -(-n // p["BN"])


def _tables(tmp_path: Path, name: str) -> dict:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc to build the kernel's index helpers")
    src = tmp_path / "helpers.cu"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "helpers"
    defines = [f"-DKP_{k}={v}" for k, v in BUILDS[name].items()]
    build = subprocess.run([str(nvcc), "-std=c++17", *defines, f"-I{CU.parent}", str(src), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    grids = sorted(set(TILE_GRIDS) | {_grid(_params(name), m, n) for m, n, _ in SHAPES})
    stdin = "".join(f"tiles {m} {n}\n" for m, n in grids) + "".join(f"window {k} 0\n" for k in K_TILES)
    run = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out: dict = {"name": name, "tiles": {}, "window": {}}
    for line in run.stdout.splitlines():
        f = line.split()
        if f[0] == "params":
            out["params"] = dict(zip(("BM", "BN", "BK", "CONSUMERS", "CLUSTER_M", "GROUP_M", "PROMOTE_EVERY",
                                      "ACC"), map(int, f[1:]), strict=True))
        elif f[0] == "acc":
            out["acc"] = [tuple(map(int, x.split(","))) for x in f[1:]]
        elif f[0] == "tiles":
            out["tiles"][(int(f[1]), int(f[2]))] = [tuple(map(int, x.split(","))) for x in f[3:]]
        elif f[0] == "window":
            out["window"][int(f[1])] = [(x[0] == "1", x[1] == "1") for x in f[2:]]
    assert set(out["tiles"]) == set(grids) and set(out["window"]) == set(K_TILES)
    return out


@pytest.fixture(scope="module", params=sorted(BUILDS))
def tables(request, tmp_path_factory):
    return _tables(tmp_path_factory.mktemp(f"fp8_{request.param}"), request.param)


def test_the_build_has_the_parameters_it_was_given(tables):
    want = _params(tables["name"])
    assert tables["params"] == {**want, "ACC": want["BN"] // 2}


@pytest.mark.parametrize("grid", TILE_GRIDS)
def test_tile_order_visits_every_tile_once_in_raster_groups(tables, grid):
    tiles_m, tiles_n = grid
    g = tables["params"]["GROUP_M"]
    order = tables["tiles"][grid]
    assert len(order) == tiles_m * tiles_n
    assert sorted(order) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]   # a bijection
    # A raster group holds GROUP_M super-rows (fewer in the last group) and walks them column by column,
    # rows fastest, so the CTAs running at the same time share B columns and A rows in L2.
    want = []
    for first in range(0, tiles_m, g):
        rows = min(g, tiles_m - first)
        want += [(first + r, n) for n in range(tiles_n) for r in range(rows)]
    assert order == want


def test_accumulator_fragment_covers_the_m64_by_bn_tile_once(tables):
    bn, acc = tables["params"]["BN"], tables["acc"]
    per = tables["params"]["ACC"]
    assert len(acc) == 128 * per
    cover = torch.zeros(64, bn, dtype=torch.int32)
    for row, col in acc:
        assert 0 <= row < 64 and 0 <= col < bn
        cover[row, col] += 1
    assert bool((cover == 1).all())
    for tid in range(128):
        mine = acc[tid * per:(tid + 1) * per]
        # The PTX ISA's wgmma fp32 D fragment: warp w owns rows 16w..16w+15; within a warp, lane/4 picks the
        # row (+8 for the second pair of each group of four) and lane%4 a column pair of each 8-wide block.
        assert {r // 16 for r, _ in mine} == {tid // 32}
        for i in range(0, per, 2):
            (r0, c0), (r1, c1) = mine[i], mine[i + 1]
            # the epilogue stores accumulators i, i+1 as one bf16x2: same row, adjacent even-aligned columns
            assert r0 == r1 and c1 == c0 + 1 and c0 % 2 == 0
            assert r0 % 16 == (tid % 32) // 4 + 8 * ((i // 2) % 2) and c0 == (i // 4) * 8 + (tid % 4) * 2


def _promote(flags: list[tuple[bool, bool]], blocks: list[float]) -> tuple[float, float, int]:
    """The consumer's k-loop: the first wgmma of a window overwrites the accumulator (scale-d 0), the
    last one is followed by the add into the fp32 sum. Returns (sum, final accumulator, longest window)."""
    acc, total, run, longest = 0.0, 0.0, 0, 0
    for (first, last), x in zip(flags, blocks, strict=True):
        acc, run = (x, 1) if first else (acc + x, run + 1)
        longest = max(longest, run)
        if last:
            total += acc
    return total, acc, longest


@pytest.mark.parametrize("k_tiles", K_TILES)
def test_promotion_windows_count_every_k_block_once(tables, k_tiles):
    pe = tables["params"]["PROMOTE_EVERY"]
    flags = tables["window"][k_tiles]
    assert flags[0][0] and flags[-1][1]        # the tile's first block starts a window, its last ends one
    blocks = [float(2 ** kt) for kt in range(k_tiles)]   # distinct powers of two: any miss or repeat shows
    total, acc, longest = _promote(flags, blocks)
    if pe == 0:
        # no promotion: one window over all of K, and the epilogue reads the wgmma accumulator itself
        assert [f for f, _ in flags] == [kt == 0 for kt in range(k_tiles)]
        assert acc == sum(blocks) and longest == k_tiles
    else:
        assert total == sum(blocks)
        assert longest == min(pe, k_tiles)     # the reduced-precision accumulator never holds more
        for kt, (first, last) in enumerate(flags):
            assert first == (kt % pe == 0)
            assert last == (kt == k_tiles - 1 or (kt + 1) % pe == 0)
            # windows abut: a block ends a window exactly when the next one starts a new one
            if kt + 1 < k_tiles:
                assert last == flags[kt + 1][0]


@pytest.mark.parametrize("k_tiles", [1, 2, 3, 5, 8, 13, 25])
def test_every_stage_is_released_once_after_its_wgmma_completed(tables, k_tiles):
    """The consumer loop's releases, replayed with the tabulated flags over two consecutive tiles (the
    ring continues across tiles): a window's last block waits for all wgmma groups (wait 0) and frees the
    previous and the current stage; any other block waits until one group is left in flight (wait 1) and
    frees the previous one."""
    flags = tables["window"][k_tiles]
    released: list[int] = []
    for tile in range(2):
        pending: list[int] = []                # committed wgmma groups not yet known complete
        prev = -1
        for kt in range(k_tiles):
            blk = tile * k_tiles + kt
            pending.append(blk)
            if flags[kt][1]:
                pending.clear()
                done = [prev, blk] if prev >= 0 else [blk]
                prev = -1
            else:
                pending = pending[-1:]
                done = [prev] if prev >= 0 else []
                prev = blk
            assert not set(done) & set(pending)   # a stage is never refilled under a running wgmma
            released += done
        assert prev == -1 and not pending         # the tile's last block is a window end: nothing leaks
    assert released == list(range(2 * k_tiles))   # in ring order, each exactly once


def _emulate(tables: dict, a: torch.Tensor, b: torch.Tensor, sa: float, sb: float) -> torch.Tensor:
    p = tables["params"]
    bm, bn, bk, cm, c = p["BM"], p["BN"], p["BK"], p["CLUSTER_M"], p["CONSUMERS"]
    m, k = a.shape
    n = b.shape[0]
    tiles_m, tiles_n, k_tiles = -(-m // (cm * bm)), -(-n // bn), -(-k // bk)
    order = tables["tiles"][(tiles_m, tiles_n)]
    flags = tables["window"][k_tiles]
    af, bf = a.float(), b.float()
    frag = torch.tensor(tables["acc"])          # (128 * BN/2, 2): (row, col) in the m64 x BN tile
    out = torch.full((m, n), float("nan"))
    for tm, tn in order:
        for rank in range(cm):                  # the CTAs of a cluster take vertically adjacent tiles
            m0, n0 = (tm * cm + rank) * bm, tn * bn
            sa_box = torch.zeros(bm, k_tiles * bk)   # TMA boxes, zero past M / N / K
            sb_box = torch.zeros(bn, k_tiles * bk)
            sa_box[: max(0, min(bm, m - m0)), :k] = af[m0: m0 + bm]
            sb_box[: max(0, min(bn, n - n0)), :k] = bf[n0: n0 + bn]
            for cw in range(c):
                for ms in range(bm // c // 64):
                    r0 = cw * (bm // c) + ms * 64
                    acc = torch.zeros(64, bn)
                    total = torch.zeros(64, bn)
                    for kt, (first, last) in enumerate(flags):
                        part = sa_box[r0: r0 + 64, kt * bk:(kt + 1) * bk] @ sb_box[:, kt * bk:(kt + 1) * bk].t()
                        acc = part if first else acc + part
                        if last:
                            total += acc
                    res = total if p["PROMOTE_EVERY"] else acc
                    # every thread's accumulators, placed where the epilogue stores them, masked at the edges
                    rows, cols = m0 + r0 + frag[:, 0], n0 + frag[:, 1]
                    live = (rows < m) & (cols < n)
                    assert bool(torch.isnan(out[rows[live], cols[live]]).all())   # nothing stored twice
                    out[rows[live], cols[live]] = res[frag[live, 0], frag[live, 1]] * (sa * sb)
    return out


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_emulated_gemm_through_the_tables_matches_torch(tables, m, n, k):
    g = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)
    sa, sb = 0.5, 2.0 * k ** -0.5
    got = _emulate(tables, a, b, sa, sb)
    ref = (a.float() @ b.float().t()) * (sa * sb)
    assert not torch.isnan(got).any()          # every element of C written
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
