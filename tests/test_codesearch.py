"""The CUTLASS code-search index: identifier-aware FTS5 + bm25, over headers the test writes and,
when the nvidia-cutlass wheel is installed, over the real CUTLASS/CuTe headers."""

import pytest

from kernelpro.agent.codesearch import (
    CodeIndex,
    chunk_lines,
    default_index,
    find_cutlass_include,
    format_snippets,
    identifier_terms,
)
from kernelpro.errors import KernelProError

TMA = """#pragma once
namespace cute {

struct SM90_TMA_LOAD_2D {
  CUTE_HOST_DEVICE static void
  copy(void const* desc_ptr, uint64_t* mbar_ptr, void* smem_ptr, int32_t const& crd0, int32_t const& crd1)
  {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" :: "r"(smem_int_ptr), "l"(gmem_int_desc), "r"(smem_int_mbar),
                 "r"(crd0), "r"(crd1) : "memory");
  }
};
}
"""
GMMA = """#pragma once
namespace cute { namespace GMMA {
union GmmaDescriptor {
  uint64_t desc_;
  struct { uint16_t start_address_ : 14, : 2; uint16_t leading_byte_offset_ : 14, : 2; } bitfield;
};
CUTE_HOST_DEVICE GmmaDescriptor make_gmma_desc(int layout_type) { GmmaDescriptor d; return d; }
} }
"""
BARRIER = """#pragma once
namespace cutlass { namespace arch {
struct ClusterTransactionBarrier {
  static void arrive_and_expect_tx(uint64_t const* smem_ptr, uint32_t transaction_bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], %0;" :: "r"(transaction_bytes), "r"(smem_ptr));
  }
};
} }
"""


def test_identifier_terms():
    t = identifier_terms("SM90_TMA_LOAD_MULTICAST make_gmma_desc GmmaDescriptor sm_90")
    for want in ("sm90_tma_load_multicast", "sm90", "tma", "load", "multicast", "make", "gmma", "desc",
                 "gmmadescriptor", "descriptor"):
        assert want in t
    assert t.count("sm90") == 2  # 'SM90' and 'sm_90' meet


def test_chunks_cut_at_blank_lines_within_bounds():
    lines = (["x;"] * 25 + [""]) * 3 + ["y;"] * 130
    ch = chunk_lines(lines)
    assert ch[0] == (0, 26)
    assert all(20 <= b - a <= 60 for a, b in ch[:-1])
    assert ch[-1][1] == len(lines)


@pytest.fixture
def index(tmp_path):
    inc = tmp_path / "include"
    (inc / "cute" / "arch").mkdir(parents=True)
    (inc / "cutlass" / "arch").mkdir(parents=True)
    (inc / "cute" / "arch" / "copy_sm90_tma.hpp").write_text(TMA)
    (inc / "cute" / "arch" / "mma_sm90_desc.hpp").write_text(GMMA)
    (inc / "cutlass" / "arch" / "barrier.h").write_text(BARRIER)
    (inc / "README.md").write_text("SM90 TMA load everywhere")  # not a header: not indexed
    idx = CodeIndex(tmp_path / "idx.db")
    assert idx.build([inc]) == 3
    yield idx, inc
    idx.close()


@pytest.mark.parametrize("query,path", [
    ("SM90 TMA load atom", "cute/arch/copy_sm90_tma.hpp"),
    ("wgmma descriptor", "cute/arch/mma_sm90_desc.hpp"),
    ("make_gmma_desc", "cute/arch/mma_sm90_desc.hpp"),
    ("mbarrier arrive expect tx", "cutlass/arch/barrier.h"),
])
def test_ranking_on_written_headers(index, query, path):
    idx, _ = index
    hits = idx.search(query, 3)
    assert hits and hits[0].path == path
    assert hits == sorted(hits, key=lambda s: -s.score)


def test_no_match_and_formatting(index):
    idx, _ = index
    assert idx.search("zzzunknownzzz") == []
    assert "no match" in format_snippets("q", [])
    text = format_snippets("tma", idx.search("tma"))
    assert "// cute/arch/copy_sm90_tma.hpp:1-" in text and "cp.async.bulk.tensor" in text


def test_rebuild_only_when_files_change(index):
    idx, inc = index
    assert idx.build([inc]) == 3
    (inc / "cute" / "arch" / "new.hpp").write_text("struct SM100_UMMA_SS {};\n")
    assert idx.build([inc]) == 4
    assert idx.search("SM100 UMMA")[0].path == "cute/arch/new.hpp"


def test_user_checkout(tmp_path, index):
    _, inc = index
    assert find_cutlass_include(str(inc.parent)) == inc
    with pytest.raises(KernelProError, match="no include/cute"):
        find_cutlass_include(str(tmp_path / "nothing"))


def test_real_cutlass_headers(tmp_path, monkeypatch):
    if find_cutlass_include() is None:
        pytest.skip("nvidia-cutlass wheel not installed (pip install nvidia-cutlass)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    idx = default_index()
    top = idx.search("SM90_TMA_LOAD", 3)
    assert any("sm90_tma" in s.path for s in top)
    assert idx.search("setmaxnreg", 2)[0].path.endswith("reg_reconfig.h")
    assert any("mma_sm90_desc" in s.path or "gmma" in s.path for s in idx.search("wgmma descriptor", 3))
