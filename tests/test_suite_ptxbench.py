"""The shipped ptxbench suite: task metadata, CPU reference runs, hardware notes, malformed task files."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelpro.agent.prompting import hardware_context
from kernelpro.errors import KernelProError, TaskError
from kernelpro.suites.task import instantiate, load_suite, load_task

ROOT = Path(__file__).resolve().parent.parent
TASKS = load_suite("ptxbench")
BY_NAME = {t.name: t for t in TASKS}

HEADLINE = {"gemm_bf16_headline", "attn_fwd_lse_bf16", "attn_fwd_lse_causal_bf16", "attn_bwd_headline_bf16",
            "attn_bwd_causal_headline_bf16"}
REQUIRED = {
    "gemm_bf16", "gemm_fp16", "gemm_fp8_e4m3", "gemm_bf16_nt", "gemm_bf16_batched", "gemm_bias_gelu_bf16",
    "gemm_bias_relu_fp16", "grouped_gemm_moe_bf16", "attn_fwd_bf16_d128", "attn_fwd_causal_bf16_d128",
    "attn_fwd_bf16_d64", "attn_fwd_causal_bf16_d64", "attn_bwd_bf16_d128", "attn_bwd_causal_bf16_d128",
    "softmax_rows_bf16", "rmsnorm_bf16", "transpose_bf16",
}
# The feature names of the static verifier's catalog, per architecture (HELPERS.md).
CATALOG = {
    "sm_90a": {"wgmma", "tma", "bulk_copy", "mbarrier", "setmaxnreg", "cluster", "dsmem", "stmatrix", "ldmatrix",
               "cp_async", "mma_sync", "fence_proxy_async", "elect_sync", "fp8_wgmma"},
    "sm_100a": {"tcgen05_mma", "tmem", "tcgen05_cp", "tma", "mbarrier", "cluster", "dsmem", "elect_sync",
                "setmaxnreg", "fence_proxy_async"},
}
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# Dimensions that are counts, not strides: free to be anything. Every other size global is a row length
# or a leading dimension somewhere, so it must keep 16-byte-multiple strides (8 x 2-byte elements).
COUNT_DIMS = {"M", "BATCH", "HEADS", "EXPERTS"}


def expected_outputs(name: str, s: dict) -> list[tuple[tuple[int, ...], torch.dtype]]:
    if name.startswith("attn_"):
        qkv = (s["BATCH"], s["HEADS"], s["SEQ"], s["HEAD_DIM"])
        if name.startswith("attn_bwd"):
            return [(qkv, BF16)] * 3
        if name.startswith("attn_fwd_lse"):
            return [(qkv, BF16), (qkv[:3], FP32)]
        return [(qkv, BF16)]
    table = {
        "gemm_bf16": ((s.get("M"), s.get("N")), BF16),
        "gemm_bf16_nt": ((s.get("M"), s.get("N")), BF16),
        "gemm_bf16_headline": ((s.get("M"), s.get("N")), BF16),
        "gemm_bias_gelu_bf16": ((s.get("M"), s.get("N")), BF16),
        "gemm_fp8_e4m3": ((s.get("M"), s.get("N")), BF16),
        "gemm_fp16": ((s.get("M"), s.get("N")), FP16),
        "gemm_bias_relu_fp16": ((s.get("M"), s.get("N")), FP16),
        "gemm_bf16_batched": ((s.get("BATCH"), s.get("M"), s.get("N")), BF16),
        "grouped_gemm_moe_bf16": ((s.get("TOKENS"), s.get("N")), BF16),
        "softmax_rows_bf16": ((s.get("ROWS"), s.get("COLS")), BF16),
        "rmsnorm_bf16": ((s.get("ROWS"), s.get("HIDDEN")), BF16),
        "transpose_bf16": ((s.get("COLS"), s.get("ROWS")), BF16),
    }
    return [table[name]]


def smallest_shown(task):
    return min(task.sizes("shown"), key=lambda s: task.work(s)[1])


def test_suite_has_the_required_and_headline_tasks():
    names = set(BY_NAME)
    assert REQUIRED <= names, f"missing: {sorted(REQUIRED - names)}"
    assert {t.name for t in TASKS if t.headline} == HEADLINE
    assert len([t for t in TASKS if not t.headline]) >= 16
    assert all(t.suite == "ptxbench" for t in TASKS)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_metadata_is_complete_and_consistent(task):
    assert task.level == (1 if task.name in {"softmax_rows_bf16", "rmsnorm_bf16", "transpose_bf16"}
                          else 3 if task.name.startswith("attn_") or task.headline else 2)
    assert task.baseline in {"cublas", "cudnn_sdpa", "torch"}
    assert task.description and task.forbid_ops and task.forbid_kernels
    re.compile(task.forbid_kernels)
    for arch, names in CATALOG.items():
        requested = set(task.requested_features(arch))
        assert requested, f"{task.name} requests nothing on {arch}"
        assert requested <= names, f"{task.name}: {sorted(requested - names)} not in the {arch} catalog"
    if task.level >= 2:  # every tensor-core task asks for the architecture's MMA path, fed by TMA
        assert {"wgmma", "tma", "mbarrier"} <= set(task.requested_features("sm_90a"))
        assert {"tcgen05_mma", "tmem", "tma"} <= set(task.requested_features("sm_100a"))
    assert len(task.shown_sizes) >= 2 and len(task.heldout_sizes) == 2
    assert not {tuple(sorted(s.items())) for s in task.shown_sizes} & {
        tuple(sorted(s.items())) for s in task.heldout_sizes}
    for size in task.sizes("all"):
        flops, nbytes = task.work(size)
        assert nbytes and nbytes > 0
        assert flops is None or flops > 0
        for key, value in size.items():
            if key not in COUNT_DIMS and isinstance(value, int):
                assert value % 8 == 0, f"{task.name}: {key}={value} breaks 16-byte TMA strides"
    # held-out sizes must exercise edges: some dimension that is not a multiple of 64
    for size in task.sizes("heldout"):
        assert any(isinstance(v, int) and not isinstance(v, bool) and v % 64 for v in size.values()), size


def test_catalog_file_names_are_known():
    path = ROOT / "kernelpro" / "static" / "features.toml"
    data = tomllib.loads(path.read_text())
    names: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                names.add(k)
                if k == "name" and isinstance(v, str):
                    names.add(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    for task in TASKS:
        for arch in CATALOG:
            missing = set(task.requested_features(arch)) - names
            assert not missing, f"{task.name}/{arch}: {sorted(missing)} absent from features.toml"


def test_headline_sizes_match_ptxbench():
    g = BY_NAME["gemm_bf16_headline"].default_size
    assert (g["M"], g["N"], g["K"]) == (8192, 7168, 5120)
    for name in HEADLINE - {"gemm_bf16_headline"}:
        s = BY_NAME[name].default_size
        assert (s["BATCH"], s["HEADS"], s["SEQ"], s["HEAD_DIM"]) == (4, 48, 4096, 128)
        assert BY_NAME[name].baseline == "cudnn_sdpa" and BY_NAME[name].level == 3
    assert BY_NAME["gemm_bf16"].default_size == {"M": 8192, "N": 8192, "K": 8192}
    assert "setmaxnreg" in BY_NAME["gemm_bf16"].requested_features("sm_90a")


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_default_inputs_fit_and_fill_the_gpu(task):
    # meta tensors: shapes and dtypes of the timed size without allocating anything
    _, _, inputs = instantiate(task, None, "meta", 0)
    nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    assert nbytes < 4 * 2**30
    flops, moved = task.work()
    assert (flops or 0) >= 1e11 or moved >= 2.5e8, "too small to fill an H200"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_reference_runs_on_cpu_at_smallest_shown_size(task):
    size = smallest_shown(task)
    _, model, inputs = instantiate(task, size, "cpu", 0)
    want_dtype = {"bf16": BF16, "fp16": FP16, "fp8_e4m3": torch.float8_e4m3fn}[task.dtype]
    assert inputs[0].dtype == want_dtype and inputs[0].device.type == "cpu"
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    want = expected_outputs(task.name, size)
    assert [(tuple(o.shape), o.dtype) for o in outs] == want
    for o in outs:
        assert torch.isfinite(o.float()).all()
    if task.name.startswith("gemm") or task.name.startswith("grouped"):
        std = outs[0].float().std().item()  # scaled inputs keep GEMM outputs O(1)
        assert 0.2 < std < 5, std


def _attention_reference(q, k, v, causal):
    s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v.float(), torch.logsumexp(s, -1)


@pytest.mark.parametrize("name", ["attn_fwd_lse_bf16", "attn_fwd_lse_causal_bf16"])
def test_lse_reference_matches_the_definition(name):
    task = BY_NAME[name]
    _, model, (q, k, v) = instantiate(task, {"BATCH": 1, "HEADS": 48, "SEQ": 136}, "cpu", 3)
    o, lse = model(q, k, v)
    ref_o, ref_lse = _attention_reference(q, k, v, "causal" in name)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(o.float(), ref_o, atol=1e-2, rtol=2e-2)


@pytest.mark.parametrize("name", ["attn_bwd_causal_bf16_d128", "attn_bwd_headline_bf16"])
def test_backward_reference_matches_autograd(name):
    task = BY_NAME[name]
    causal = "causal" in name
    mod, model, (q, k, v, o, do, lse, delta) = instantiate(task, {"BATCH": 1, "HEADS": 2, "SEQ": 72}, "cpu", 5)
    torch.testing.assert_close(delta, (do.float() * o.float()).sum(-1))
    dq, dk, dv = model(q, k, v, o, do, lse, delta)
    qf, kf, vf = (t.float().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal).backward(do.float())
    for got, ref in ((dq, qf.grad), (dk, kf.grad), (dv, vf.grad)):
        err = (got.float() - ref).norm() / ref.norm()
        assert err < 1e-2, f"{name}: relative error {err:.2e}"


def test_moe_groups_are_uneven_aligned_and_cover_all_tokens():
    task = BY_NAME["grouped_gemm_moe_bf16"]
    for size in task.sizes("all"):
        mod, _, _ = instantiate(task, size, "meta", 0)  # the module with `size` applied to its globals
        sizes = mod.group_sizes()
        assert len(sizes) == size["EXPERTS"] and sum(sizes) == size["TOKENS"]
        assert all(s > 0 and s % 8 == 0 for s in sizes) and len(set(sizes)) > 1
    _, model, (x, w, offsets) = instantiate(task, smallest_shown(task), "cpu", 0)
    assert offsets.dtype == torch.int32 and offsets[-1].item() == x.shape[0]
    y = model(x, w, offsets)
    e1_start, e1_end = offsets[0].item(), offsets[1].item()
    torch.testing.assert_close(y[e1_start:e1_end].float(), (x[e1_start:e1_end] @ w[1].t()).float())


GEMM_LIBRARY_KERNELS = [
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNT",
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NNT",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
    "kernel__5x_cublas",
    "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8>(cutlass_80_"
    "wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8::Params)",
    "void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel::Gemm>>(int)",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn",
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false>(int)",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16>(int)",
]
ATTN_LIBRARY_KERNELS = [
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::"
    "bfloat16_t>, false, true, false>(pytorch_flash::Flash_fwd_params)",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>(int)",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, at::native::"
    "(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
    "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
] + GEMM_LIBRARY_KERNELS
USER_KERNELS = [
    "my_gemm(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, int, int, int)",
    "void gemm_kernel<128, 256, 64>(CUtensorMap, CUtensorMap, __nv_bfloat16*, int, int, int)",
    "sm90_gemm_tma_warpspecialized(CUtensorMap, CUtensorMap, __nv_bfloat16*, int, int, int)",
    "void flash_fwd_kernel<128>(CUtensorMap, float*, int)",
    "void attention_bwd_dq_dk_dv<64>(CUtensorMap, CUtensorMap, float*, int)",
    "void (anonymous namespace)::softmax_kernel<1024>(__nv_bfloat16 const*, __nv_bfloat16*, int, int)",
    "rmsnorm_tma_kernel(CUtensorMap, __nv_bfloat16 const*, __nv_bfloat16*, float, int, int)",
    "transpose_tma_kernel(CUtensorMap, CUtensorMap, int, int)",
    "void kp::grouped_gemm_wgmma<cute::tuple<int, int>>(CUtensorMap, int const*, __nv_bfloat16*)",
]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_forbid_kernels_hit_library_names_and_spare_hand_written_ones(task):
    pattern = re.compile(task.forbid_kernels)
    if task.level >= 2:
        library = ATTN_LIBRARY_KERNELS if task.name.startswith("attn_") else GEMM_LIBRARY_KERNELS
        for name in library:
            assert pattern.search(name), f"{task.name} lets the library kernel {name[:60]} through"
    for name in USER_KERNELS:
        assert not pattern.search(name), f"{task.name} would reject the hand-written {name[:60]}"


def test_memory_bound_forbid_kernels_hit_torch_kernels():
    cases = {
        "softmax_rows_bf16": ATTN_LIBRARY_KERNELS[4:6],
        "rmsnorm_bf16": [
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int)",
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
            "float, float>, unsigned int, float, 4, 4> >(int)"],
        "transpose_bf16": [
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_"
            "copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)"],
    }
    for name, kernels in cases.items():
        pattern = re.compile(BY_NAME[name].forbid_kernels)
        for k in kernels:
            assert pattern.search(k), f"{name}: {k[:60]}"


def test_hardware_context_ablation_flag():
    for arch in ("sm_90a", "sm_100a"):
        bare = hardware_context(arch, with_docs=False, with_patterns=False)
        docs = hardware_context(arch, with_docs=True, with_patterns=False)
        both = hardware_context(arch, with_docs=True, with_patterns=True)
        assert arch in bare and len(docs) > 3 * len(bare) and both.startswith(docs.strip()[:200])
        assert "online softmax" in both.lower() and "online softmax" not in docs.lower()
        assert "<!--" not in both
        assert "mbarrier.try_wait.parity" in docs and "mbarrier.try_wait.parity" not in bare
        assert "cp.async.bulk.tensor" in docs and "setmaxnreg.inc" in docs
    h = hardware_context("sm_90a", with_docs=True)
    b = hardware_context("sm_100a", with_docs=True)
    assert "wgmma.mma_async" in h and "tcgen05.alloc" not in h
    assert "tcgen05.mma" in b and "tcgen05.alloc" in b and "tcgen05.ld" in b and "wgmma.mma_async" not in b
    with pytest.raises(KernelProError, match="sm_80"):
        hardware_context("sm_80", True, False)


def test_readme_table_is_generated_from_the_suite():
    spec = importlib.util.spec_from_file_location("kp_list_tasks", ROOT / "docs" / "measurements" / "recipes" / "list_tasks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    table = mod.markdown_table("ptxbench")
    assert len(table.strip().splitlines()) == 2 + len(TASKS)
    readme = (ROOT / "kernelpro" / "suites" / "ptxbench" / "README.md").read_text()
    assert table in readme, "README task table is stale: run docs/measurements/recipes/list_tasks.py ptxbench --update ..."


GOOD = '''
import torch
import torch.nn as nn
M = 64
META = {"dtype": "bf16", "sizes": {"shown": [{"M": 32}]}}
class Model(nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.randn(M, dtype=torch.bfloat16)]
def get_init_inputs():
    return []
'''
BROKEN = {
    "no_inputs": (GOOD.replace("def get_inputs", "def make_inputs"), "get_inputs"),
    "computed_meta": (GOOD.replace('META = {"dtype": "bf16", "sizes": {"shown": [{"M": 32}]}}',
                                   'META = dict(dtype="bf16")'), "literal"),
    "unknown_key": (GOOD.replace('"dtype": "bf16"', '"dtype": "bf16", "speed": 3'), "unknown key"),
    "bad_dtype": (GOOD.replace('"dtype": "bf16"', '"dtype": "bfloat16"'), "dtype"),
    "bad_size_key": (GOOD.replace('{"M": 32}', '{"N": 32}'), "does not define"),
    "syntax_error": (GOOD.replace("def forward(self, x):", "def forward(self, x)"), "not valid Python"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_malformed_task_file_gives_one_line_error_naming_the_file(tmp_path, case):
    text, fragment = BROKEN[case]
    path = tmp_path / f"{case}.py"
    path.write_text(text)
    with pytest.raises(TaskError) as err:
        load_task(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and fragment in msg


def test_good_template_loads(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text(GOOD)
    assert load_task(path).shown_sizes == ({"M": 32},)


def test_list_tasks_script_reports_a_broken_suite(tmp_path, capsys):
    (tmp_path / "bad.py").write_text(BROKEN["bad_dtype"][0])
    spec = importlib.util.spec_from_file_location("kp_list_tasks2", ROOT / "docs" / "measurements" / "recipes" / "list_tasks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kp_list_tasks2"] = mod
    spec.loader.exec_module(mod)
    assert mod.main([str(tmp_path)]) == 2
    assert "bad.py" in capsys.readouterr().err
