"""Static verification on a corpus of small kernels: every feature is found where it is real, and never
where it only looks real (comment, string, unreachable function, wrong target, dead branch)."""

import argparse
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelpro.errors import KernelProError
from kernelpro.static.features import load_catalog
from kernelpro.static.verify import (
    ABSENT,
    DECLARED,
    EMITTED,
    CudaSource,
    cmd_verify,
    extract_sources,
    print_report,
    verify,
    verify_task_candidate,
)
from kernelpro.suites.task import load_task
from kernelpro.toolchain import find_tool

KERNELS = Path(__file__).parent / "kernels" / "static"
pytestmark = pytest.mark.skipif(find_tool("nvcc") is None or find_tool("cuobjdump") is None,
                                reason="nvcc/cuobjdump not installed")

# (corpus file, arch, extra nvcc flags) compiled once per module, in parallel.
CASES = {
    "common90": ("common_features.cu", "sm_90a", ()),
    "common100": ("common_features.cu", "sm_100a", ()),
    "wgmma90a": ("wgmma.cu", "sm_90a", ()),
    "wgmma90": ("wgmma.cu", "sm_90", ()),
    "tcgen05": ("tcgen05.cu", "sm_100a", ()),
    "negatives": ("negatives.cu", "sm_90a", ()),
    "rdc": ("unreachable_rdc.cu", "sm_90a", ("-rdc=true",)),
    "dead": ("dead_branch.ptx", "sm_90a", ()),
    "unreachable_ptx": ("unreachable.ptx", "sm_90a", ()),
    "py": ("model_inline.py", "sm_90a", ()),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")

    def run(key):
        name, arch, flags = CASES[key]
        path = KERNELS / name
        sources = None
        if flags:
            sources = [CudaSource(path.suffix[1:], path.read_text(), name, list(flags))]
        return key, verify(path, arch, None, workdir=root / key, sources=sources)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, CASES))


SM90_ONE_FEATURE = {
    "k_tma": "tma", "k_bulk_copy": "bulk_copy", "k_mbarrier": "mbarrier", "k_setmaxnreg": "setmaxnreg",
    "k_cluster": "cluster", "k_dsmem": "dsmem", "k_stmatrix": "stmatrix", "k_ldmatrix": "ldmatrix",
    "k_cp_async": "cp_async", "k_mma_sync": "mma_sync", "k_fence_proxy_async": "fence_proxy_async",
    "k_elect_sync": "elect_sync", "k_ldmatrix_via_call": "ldmatrix",
}
# What else each kernel legitimately uses in its PTX (TMA needs an mbarrier and a proxy fence, ...).
ALSO = {"k_tma": {"mbarrier", "fence_proxy_async"}, "k_bulk_copy": {"mbarrier", "fence_proxy_async"},
        "k_dsmem": {"cluster"}}


@pytest.mark.parametrize("arch_key", ["common90", "common100"])
def test_each_feature_is_emitted_by_its_kernel(reports, arch_key):
    r = reports[arch_key]
    assert r.compiled
    for kernel, feature in SM90_ONE_FEATURE.items():
        k = r.kernel(kernel)
        assert set(k.ptx_features) == {feature} | ALSO.get(kernel, set()), kernel
        assert feature in k.sass_features, (kernel, k.sass_features)
        assert k.status[feature] == EMITTED
    plain = r.kernel("k_plain")
    assert plain.ptx_features == {} and plain.sass_features == {} and plain.status == {}


def test_sass_evidence_names(reports):
    r = reports["common90"]
    assert r.kernel("k_tma").sass_features["tma"] == ["UTMALDG.2D", "UTMAPF.L2.2D", "UTMASTG.2D"]
    assert r.kernel("k_bulk_copy").sass_features["bulk_copy"] == ["UBLKCP.G.S", "UBLKCP.S.G"]
    assert {op.split(".")[0] for op in r.kernel("k_mbarrier").sass_features["mbarrier"]} == {"SYNCS"}
    assert all(op.startswith("USETMAXREG") for op in r.kernel("k_setmaxnreg").sass_features["setmaxnreg"])
    assert r.kernel("k_stmatrix").sass_features["stmatrix"][0].startswith("STSM")
    assert r.kernel("k_cp_async").sass_features["cp_async"][0].startswith("LDGSTS")
    assert r.kernel("k_cluster").sass_features["cluster"] == ["UCGABAR_ARV", "UCGABAR_WAIT"]
    # The call graph carries ldmatrix from a __noinline__ helper into its kernel.
    assert "_Z15ldmatrix_helperPKt" in r.kernel("k_ldmatrix_via_call").ptx_functions


def test_wgmma_sm90a(reports):
    r = reports["wgmma90a"]
    bf16, fp8 = r.kernel("k_wgmma_bf16"), r.kernel("k_wgmma_fp8")
    assert bf16.status == {"wgmma": EMITTED} and bf16.sass_features["wgmma"][0].startswith("HGMMA.64x8x16.F32.BF16")
    assert fp8.status == {"wgmma": EMITTED, "fp8_wgmma": EMITTED}
    assert fp8.sass_features["fp8_wgmma"][0].startswith("QGMMA")
    assert "fp8_wgmma" not in bf16.ptx_features


def test_wgmma_for_sm90_fails_and_is_not_emitted(reports):
    r = reports["wgmma90"]
    assert not r.compiled and not r.passed
    assert r.features["wgmma"] == DECLARED
    assert any(d.tool == "ptxas" and "not supported on .target 'sm_90'" in d.message for d in r.diagnostics)
    assert all(not k.compiled and k.sass_features == {} for k in r.kernels)
    assert r.compile_errors.startswith("kernel.ptx:") and r.summary == ("compile failed: wgmma needs "
                                                                                   "the arch-specific target sm_90a, not sm_90")


def test_tcgen05_sm100a(reports):
    r = reports["tcgen05"]
    assert r.compiled
    assert r.kernel("k_tmem").status == {"tmem": EMITTED}
    assert set(r.kernel("k_tmem").sass_features["tmem"]) >= {"LDTM", "STTM", "UTCATOMSWS.FIND_AND_SET.ALIGN"}
    mma = r.kernel("k_tcgen05_mma")
    assert set(mma.ptx_features) == {"tcgen05_mma", "tmem", "mbarrier"}
    assert mma.status["tcgen05_mma"] == EMITTED and mma.sass_features["tcgen05_mma"] == ["UTCHMMA"]
    assert r.kernel("k_tcgen05_mma_fp8").sass_features["tcgen05_mma"] == ["UTCQMMA"]
    cp = r.kernel("k_tcgen05_cp")
    assert cp.status["tcgen05_cp"] == EMITTED and cp.sass_features["tcgen05_cp"][0].startswith("UTCCP")
    assert "tcgen05_cp" not in mma.ptx_features and "tcgen05_mma" not in cp.ptx_features


def test_comment_and_string_are_not_features(reports, tmp_path):
    r = reports["negatives"]
    src = (KERNELS / "negatives.cu").read_text()
    assert "wgmma.mma_async" in src and "setmaxnreg" in src  # a grep of the source would be fooled
    ptx = (tmp_path.parent / "verify0" / "negatives" / "src0" / "kernel.ptx")
    if ptx.is_file():
        assert "// setmaxnreg.inc" in ptx.read_text()  # the asm comment really reaches the PTX
    for k in r.kernels:
        assert k.ptx_features == {} and k.sass_features == {}, k.name
    assert r.kernel("k_string").ptx_functions == ["k_string", "vprintf"]


def test_unreachable_function_does_not_count_in_ptx_or_sass(reports):
    r = reports["rdc"]
    assert r.compiled and r.unreachable_functions == ["never_called"]
    live = r.kernel("k_live")
    assert live.ptx_functions == ["k_live", "live_elect"]
    assert "wgmma" not in live.ptx_features and "wgmma" not in live.sass_features
    assert live.status == {"elect_sync": EMITTED}  # reached only through the ELF call graph
    hand = reports["unreachable_ptx"]
    assert sorted(hand.unreachable_functions) == ["dead_helper", "dead_leaf"]
    assert hand.features == {"elect_sync": EMITTED}


def test_dead_branch_is_declared_not_emitted(reports):
    r = reports["dead"]
    assert r.compiled
    assert r.kernel("k_dead_tma").status == {"tma": DECLARED}
    assert r.features == {"tma": DECLARED}


def test_py_candidate_end_to_end(reports):
    r = reports["py"]
    assert r.compiled and r.features == {"bulk_copy": EMITTED, "mbarrier": EMITTED}
    (k,) = r.kernels
    assert "bulk_scale" in k.name and k.sass_features["bulk_copy"] == ["UBLKCP.S.G"]
    assert r.sources[0]["flags"][-1] == "-O3"  # the candidate's -arch=sm_90a was dropped; verify sets it


def test_requested_features_and_json(reports, tmp_path):
    r = verify(KERNELS / "dead_branch.ptx", "sm_90a", ["tma", "mbarrier"], workdir=tmp_path)
    assert r.features == {"tma": DECLARED, "mbarrier": ABSENT} and not r.passed
    assert r.missing_features == ["tma", "mbarrier"]
    assert r.summary == "tma: declared, not emitted; mbarrier: absent"
    d = json.loads(r.to_json())
    assert d["features"] == {"tma": DECLARED, "mbarrier": ABSENT} and d["passed"] is False
    assert d["kernels"][0]["name"] == "k_dead_tma" and d["kernels"][0]["registers"] > 0
    with pytest.raises(KernelProError, match="unknown feature 'tmaa'"):
        verify(KERNELS / "dead_branch.ptx", "sm_90a", ["tmaa"])
    with pytest.raises(KernelProError, match="unknown feature 'wgmma' for sm_100a"):
        verify(KERNELS / "dead_branch.ptx", "sm_100a", ["wgmma"])


def test_render_report(reports):
    from rich.console import Console

    console = Console(width=200, record=True)
    print_report(console, reports["wgmma90"], verbose=True)
    text = console.export_text()
    assert "compile FAILED" in text and "declared, not emitted" in text and "k_wgmma_fp8" in text
    assert "not supported on .target 'sm_90'" in text
    # without --verbose: the cause on the first line, the errors once each, no tables
    console = Console(width=80, record=True)
    print_report(console, reports["wgmma90"])
    short = console.export_text()
    first = short.replace("\n", " ").split("kernel.ptx")[0]
    assert "compile FAILED" in first and "wgmma" in first and "declared, not emitted" not in short
    assert "cannot be compiled for architecture" not in short and "--verbose shows" in short


def test_extract_sources_py_reading_a_sibling_file(tmp_path):
    # The candidate open()s "sibling_kernel.cu" by a relative path: the reader runs in its folder.
    (src,) = extract_sources(KERNELS / "model_sibling.py")
    assert src.kind == "cu" and "scale_mbarrier_kernel" in src.text
    assert src.text.startswith("#include <torch/types.h>")  # what load_inline itself prepends
    assert "-O3" in src.extra_flags and "--use_fast_math" in src.extra_flags
    assert not any("sm_80" in f or f == "-gencode" for f in src.extra_flags)
    assert any(Path(d, "torch", "extension.h").is_file() for d in src.include_dirs)


def test_extract_sources_errors(tmp_path):
    with pytest.raises(KernelProError, match="loads no CUDA code"):
        extract_sources(KERNELS / "model_nocuda.py")
    with pytest.raises(KernelProError, match="did not reach load_inline within 3 s"):
        extract_sources(KERNELS / "model_hang.py", timeout=3)
    boom = tmp_path / "boom.py"
    boom.write_text("import torch\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(KernelProError, match=r"boom.py:2: RuntimeError: no GPU here"):
        extract_sources(boom)
    other = tmp_path / "k.cuh"
    other.write_text("")
    with pytest.raises(KernelProError, match=r"expected a \.py"):
        extract_sources(other)


def test_catalog_covers_the_project_feature_names():
    cat = load_catalog()
    sm90 = {"wgmma", "tma", "bulk_copy", "mbarrier", "setmaxnreg", "cluster", "dsmem", "stmatrix", "ldmatrix",
            "cp_async", "mma_sync", "fence_proxy_async", "elect_sync", "fp8_wgmma"}
    sm100 = {"tcgen05_mma", "tmem", "tcgen05_cp", "tma", "mbarrier", "cluster", "dsmem", "elect_sync",
             "setmaxnreg", "fence_proxy_async"}
    assert sm90 <= set(cat.features("sm_90a")) and sm100 <= set(cat.features("sm_100a"))
    assert "wgmma" not in cat.features("sm_100a")
    for f in cat.features("sm_90a").values():
        assert len(f.description) > 150 and f.ptx and f.sass
    bulk = cat.feature("sm_90a", "bulk_copy")
    assert bulk.ptx_match("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
    assert not bulk.ptx_match("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes")
    assert not bulk.ptx_match("cp.async.bulk.commit_group")
    cp = cat.feature("sm_90a", "cp_async")
    assert cp.ptx_match("cp.async.cg.shared.global") and not cp.ptx_match("cp.async.bulk.prefetch.L2.global")


def _task(tmp_path):
    t = tmp_path / "t_dead.py"
    t.write_text('import torch\nM = 4\nMETA = {"features": {"sm_90a": ["tma"]}}\n'
                 "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                 "def get_inputs():\n    return [torch.zeros(M)]\ndef get_init_inputs():\n    return []\n")
    return t


def test_verify_task_candidate(tmp_path):
    task = load_task(_task(tmp_path))
    r = verify_task_candidate(task, KERNELS / "dead_branch.ptx", "sm_90a")
    assert r.requested == ["tma"] and r.features == {"tma": DECLARED}


def test_cmd_verify_records_in_the_store(tmp_path, capsys):
    db = tmp_path / "runs.db"
    args = argparse.Namespace(candidate=str(KERNELS / "unreachable.ptx"), arch="sm_90a", features="elect_sync",
                              task=None, json=True, db=str(db), keep=None)
    assert cmd_verify(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["features"] == {"elect_sync": EMITTED}
    args.features, args.task = None, str(_task(tmp_path))
    args.candidate = str(KERNELS / "dead_branch.ptx")
    assert cmd_verify(args) == 1  # tma declared but not emitted
    capsys.readouterr()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT v.ok, v.arch, c.kind, c.task FROM verifications v JOIN candidates c"
                       " ON c.id = v.candidate_id ORDER BY v.id").fetchall()
    assert rows[0] == (1, "sm_90a", "ptx", "-/unreachable")
    assert rows[1][:3] == (0, "sm_90a", "ptx") and rows[1][3].endswith("/t_dead")
