// Host program over the Blackwell references' own index and descriptor functions (the kernels are
// compiled into it but never launched): prints JSON that tests/test_reference_blackwell_static.py checks
// against a model of the PTX ISA's bit layouts and canonical shared-memory layouts.
//
// Build: nvcc -gencode=arch=compute_100a,code=sm_100a -std=c++17 -I<reference dir>
//        -DKP_B_KMAJOR=0|1 -DATTN_CAUSAL=0|1 blackwell_model.cu
// Run:   ./a.out M N K SEQ
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "blackwell_gemm.cu"
#include "blackwell_attn_fwd.cu"

static void print_u64_list(const char* key, const std::vector<unsigned long long>& v, bool last = false) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%llu", i ? ", " : "", v[i]);
  std::printf("]%s\n", last ? "" : ",");
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s M N K SEQ\n", argv[0]);
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]), seq = std::atoi(argv[4]);
  const uint32_t stage = 0x2400;   // any 1024-aligned shared-memory offset

  std::printf("{\n\"b_kmajor\": %d, \"causal\": %d, \"bn\": %d, \"bk\": %d, \"bm\": %d,\n", KP_B_KMAJOR, ATTN_CAUSAL,
              kp_bw_gemm::BN, kp_bw_gemm::BK, kp_bw_gemm::BM);
  std::printf("\"stage\": %u, \"b_slab\": %d, \"attn_slab\": %d,\n", stage, kp_bw_gemm::kBSlabBytes, kp_bw_attn::SLAB);
  std::printf("\"idesc_gemm\": %u, \"idesc_qk\": %u, \"idesc_pv\": %u,\n", kp_bw_gemm::kIdesc, kp_bw_attn::IDESC_QK,
              kp_bw_attn::IDESC_PV);
  std::vector<unsigned long long> a, b, q, k, p, v;
  for (int kk = 0; kk < kp_bw_gemm::BK / 16; ++kk) {
    a.push_back(kp_bw_gemm::a_desc(stage, kk));
    b.push_back(kp_bw_gemm::b_desc(stage, kk));
  }
  for (int kk = 0; kk < 8; ++kk) {
    q.push_back(kp_bw_attn::q_desc(stage, kk));
    k.push_back(kp_bw_attn::k_desc(stage, kk));
    p.push_back(kp_bw_attn::p_desc(stage, kk));
    v.push_back(kp_bw_attn::v_desc(stage, kk));
  }
  print_u64_list("a_desc", a);
  print_u64_list("b_desc", b);
  print_u64_list("q_desc", q);
  print_u64_list("k_desc", k);
  print_u64_list("p_desc", p);
  print_u64_list("v_desc", v);
  std::vector<unsigned long long> pu;
  for (int r = 0; r < 128; ++r)
    for (int u = 0; u < 16; ++u) pu.push_back(kp_bw_attn::p_unit_offset(r, u));
  print_u64_list("p_unit_offset", pu);   // row-major over (row 0..127, unit 0..15)
  std::printf("\"gemm_smem\": %d, \"gemm_tmem_cols\": %d, \"attn_smem\": %d, \"attn_tmem_cols\": %d, "
              "\"s_col\": %u, \"o_col\": %u,\n", kp_bw_gemm::kSmemBytes, kp_bw_gemm::kTmemCols, kp_bw_attn::SMEM_TOTAL,
              kp_bw_attn::TMEM_COLS, kp_bw_attn::S_COL, kp_bw_attn::O_COL);
  std::printf("\"tmem_addr\": [%u, %u],\n", kp_bw::tmem_addr(0x00100000u, 96, 160), kp_bw::tmem_addr(0, 31, 255));

  // GEMM: every output element stored exactly once over all CTAs, threads and column chunks; every
  // tile's TMA boxes, as (c0, c1) pairs, listed for the model to check against the tile.
  const int tiles = kp_bw_gemm::tiles_m(M) * kp_bw_gemm::tiles_n(N);
  std::vector<unsigned char> hits(static_cast<size_t>(M) * N, 0);
  long long outside = 0, multi = 0, zero = 0;
  std::printf("\"tiles\": [");
  for (int t = 0; t < tiles; ++t) {
    int m0, n0;
    kp_bw_gemm::tile_origin(t, N, &m0, &n0);
    std::printf("%s{\"m0\": %d, \"n0\": %d, \"a\": [", t ? ", " : "", m0, n0);
    const int k_tiles = (K + kp_bw_gemm::BK - 1) / kp_bw_gemm::BK;
    for (int kt = 0; kt < k_tiles; ++kt) {
      int c0, c1;
      kp_bw_gemm::a_box(m0, kt, &c0, &c1);
      std::printf("%s[%d, %d]", kt ? ", " : "", c0, c1);
    }
    std::printf("], \"b\": [");
    int nb = 0;
    for (int kt = 0; kt < k_tiles; ++kt)
      for (int j = 0; j < kp_bw_gemm::kBBoxes; ++j) {
        int c0, c1;
        kp_bw_gemm::b_box(n0, kt, j, &c0, &c1);
        std::printf("%s[%d, %d, %d]", nb++ ? ", " : "", j, c0, c1);
      }
    std::printf("]}");
    for (int th = 0; th < kp_bw_gemm::kThreads; ++th)
      for (int cc = 0; cc < kp_bw_gemm::BN / 32; ++cc)
        for (int e = 0; e < 32; ++e) {
          int row, col;
          kp_bw_gemm::epilogue_element(m0, n0, th, cc, e, &row, &col);
          if (row >= M || col >= N) continue;   // the kernel's store mask
          if (row < 0 || col < 0) {
            ++outside;
            continue;
          }
          unsigned char& h = hits[static_cast<size_t>(row) * N + col];
          if (h == 1) ++multi;
          h = h < 2 ? h + 1 : 2;
        }
  }
  std::printf("],\n");
  for (unsigned char h : hits) zero += h == 0;
  std::printf("\"gemm_cover\": {\"tiles\": %d, \"zero\": %lld, \"multi\": %lld, \"outside\": %lld},\n", tiles, zero,
              multi, outside);

  // Attention: each query row written by exactly one (CTA, thread); each key a row must see lies in a
  // key tile its CTA visits and passes the mask, and no key it must not see does.
  const int gx = (seq + kp_bw_attn::BLOCK_M - 1) / kp_bw_attn::BLOCK_M;
  std::vector<int> row_hits(seq, 0);
  long long missing = 0, extra = 0, bad_tile = 0;
  std::vector<int> owner(gx, 0);
  for (int bx = 0; bx < gx; ++bx) {
    const int mb = kp_bw_attn::query_tile(bx, gx);
    if (mb < 0 || mb >= gx) {
      ++bad_tile;
      continue;
    }
    ++owner[mb];
    const int nbt = kp_bw_attn::kv_tiles(mb, seq);
    for (int r = 0; r < kp_bw_attn::BLOCK_M; ++r) {
      const int qq = mb * kp_bw_attn::BLOCK_M + r;
      if (qq >= seq) continue;
      ++row_hits[qq];
      for (int key = 0; key < seq; ++key) {
        const bool should = ATTN_CAUSAL ? key <= qq : true;
        const bool sees = key / kp_bw_attn::BLOCK_N < nbt && kp_bw_attn::key_visible(qq, key, seq);
        missing += should && !sees;
        extra += sees && !should;
      }
    }
  }
  long long rows_zero = 0, rows_multi = 0, tiles_not_once = 0;
  for (int h : row_hits) {
    rows_zero += h == 0;
    rows_multi += h > 1;
  }
  for (int o : owner) tiles_not_once += o != 1;
  std::printf("\"attn_cover\": {\"ctas\": %d, \"rows_zero\": %lld, \"rows_multi\": %lld, \"missing_keys\": %lld, "
              "\"extra_keys\": %lld, \"bad_tile\": %lld, \"tiles_not_once\": %lld}\n}\n",
              gx, rows_zero, rows_multi, missing, extra, bad_tile, tiles_not_once);
  return 0;
}
