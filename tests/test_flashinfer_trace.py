"""FlashInfer-Trace (PTXBench) definitions and TVM-FFI solutions: loading, bad input, the nvcc build,
static verdicts, the ptxbench profile's rule and timing schedule, and (GPU) the whole bench path."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernelpro.cli import main
from kernelpro.errors import KernelProError, TaskError
from kernelpro.suites.flashinfer import SUITE, load_trace_set
from kernelpro.suites.suite import get_suite
from tests.flashinfer_kernels import write_solutions

DATA = Path(__file__).parent / "data" / "flashinfer_trace"
HAVE_NVCC = shutil.which("nvcc") is not None
try:
    import tvm_ffi  # noqa: F401

    HAVE_FFI = True
except ImportError:
    HAVE_FFI = False
needs_build = pytest.mark.skipif(not (HAVE_NVCC and HAVE_FFI), reason="needs nvcc and apache-tvm-ffi "
                                 "(pip install 'kernelpro[tvmffi]')")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELPRO_CACHE", str(tmp_path / "cache"))


def _tasks():
    return {t.name: t for t in get_suite(SUITE).tasks(path=str(DATA))}


def test_definitions_become_typed_tasks():
    t = _tasks()
    assert sorted(t) == ["gemm_n256_k512", "mha_bwd_d128_test", "mha_with_lse_d128_test"]
    g = t["gemm_n256_k512"]
    assert g.key == "flashinfer-trace/gemm_n256_k512" and g.dtype == "bf16"
    assert g.default_size == {"KP_WORKLOAD": 0, "M": 512} and g.shown_sizes == ({"M": 100, "KP_WORKLOAD": 1},)
    assert g.requested_features("sm_90a") == ("tma", "wgmma") and not g.sdpa
    assert t["mha_bwd_d128_test"].sdpa == {"direction": "backward", "causal": False}
    assert t["mha_with_lse_d128_test"].sdpa == {"direction": "forward", "causal": False}


def test_reference_runs_the_definitions_run_on_each_workload():
    from kernelpro.suites.task import instantiate

    g = _tasks()["gemm_n256_k512"]
    for size in g.sizes("all"):
        _, model, (a, b) = instantiate(g, size)
        assert a.shape == (size["M"], 512) and b.shape == (256, 512) and a.dtype == torch.bfloat16
        assert torch.equal(model(a, b), torch.matmul(a, b.T))
    f = _tasks()["mha_with_lse_d128_test"]
    _, model, qkv = instantiate(f, f.sizes("shown")[0])
    o, lse = model(*qkv)
    assert o.shape == (2, 4, 128, 128) and o.dtype == torch.bfloat16 and lse.shape == (2, 4, 128)
    assert lse.dtype == torch.float32


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "ts"
    shutil.copytree(DATA, d, ignore=shutil.ignore_patterns("kernels"))
    return d


def _edit_json(p: Path, fn) -> None:
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d))


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(extra=1), "unknown key(s) ['extra']"),
    (lambda d: d["axes"]["N"].update(value=-1), "const axis 'N' needs a non-negative integer"),
    (lambda d: d["inputs"]["A"].update(dtype="float64"), "dtype 'float64' is not one of"),
    (lambda d: d["inputs"]["A"].update(shape=["M", "Q"]), "undefined axis 'Q'"),
    (lambda d: d.update(reference="def main(A, B):\n    return A\n"), "must define a top-level function run()"),
    (lambda d: d["outputs"].update(A=d["outputs"]["C"]), "input and output names overlap"),
])
def test_bad_definition_is_one_line_naming_the_file(tmp_path, edit, words):
    ts = _copy(tmp_path)
    p = ts / "definitions" / "gemm" / "gemm_n256_k512.json"
    _edit_json(p, edit)
    with pytest.raises(TaskError) as e:
        load_trace_set(ts)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and words in msg


@pytest.mark.parametrize("line, words", [
    ("not json", "workload line is not JSON"),
    ('{"definition": "gemm_n256_k512", "workload": {"uuid": "u", "axes": {"M": 4}}, "extra": 1}', "unknown key"),
    ('{"definition": "gemm_n256_k512", "workload": {"uuid": "u", "axes": {"M": 4, "N": 7}}}', "fixes it at 256"),
    ('{"definition": "gemm_n256_k512", "workload": {"uuid": "u", "axes": {}}}', "no value for var axis 'M'"),
    ('{"definition": "nope", "workload": {"uuid": "u", "axes": {"M": 4}}}', "names definition 'nope'"),
    ('{"definition": "gemm_n256_k512", "workload": {"uuid": "u", "axes": {"M": 4}, "inputs": {"A": '
     '{"type": "scalar", "value": 1}}}}', "a scalar value cannot fill it"),
])
def test_bad_workload_line_is_one_line_naming_file_and_line(tmp_path, line, words):
    ts = _copy(tmp_path)
    p = ts / "workloads" / "gemm" / "gemm_n256_k512.jsonl"
    p.write_text(p.read_text() + line + "\n")
    with pytest.raises(TaskError) as e:
        load_trace_set(ts)
    msg = str(e.value)
    assert "\n" not in msg and f"{p}:3" in msg and words in msg


def test_missing_path_and_not_a_trace_set(tmp_path):
    with pytest.raises(TaskError, match="needs --path"):
        load_trace_set(None)
    with pytest.raises(TaskError, match="not a FlashInfer-Trace trace set"):
        load_trace_set(tmp_path)


def test_tasks_cli_lists_a_trace_set(capsys):
    assert main(["tasks", SUITE, "--path", str(DATA)]) == 0
    out = capsys.readouterr().out
    assert "gemm_n256_k512" in out and "mha_bwd_d128_test" in out


def test_bad_solution_bundle_is_one_line(tmp_path):
    sol = write_solutions(tmp_path / "sol", "honest")
    p = sol / "gemm_n256_k512" / "solution.json"
    _edit_json(p, lambda d: d["spec"].update(compiler="gcc"))
    with pytest.raises(KernelProError) as e:
        get_suite(SUITE).solution_for(_tasks()["gemm_n256_k512"], str(sol))
    assert "\n" not in str(e.value) and str(p) in str(e.value) and "unknown key(s) ['compiler']" in str(e.value)


def test_ptxbench_elementwise_rule_differs_from_allclose():
    from kernelpro.harness.profiles import PTXBENCH_TOLERANCE
    from kernelpro.harness.tensors import error_stats

    ref = torch.tensor([1.0, 100.0])
    # 0.015 off at 1.0: allclose(1e-2, 1e-2) allows 0.02 there, PTXBench's rule allows max(0.01, 0.01)
    out = torch.tensor([1.015, 100.9])
    loose = {"atol": 1e-2, "rtol": 1e-2, "rel_norm": float("inf")}
    assert error_stats(out, ref, loose)["ok"] is True
    assert error_stats(out, ref, PTXBENCH_TOLERANCE)["ok"] is False
    assert error_stats(torch.tensor([1.009, 100.9]), ref, PTXBENCH_TOLERANCE)["ok"] is True


def test_ptxbench_timing_schedule_counts_and_means_trial_medians():
    from kernelpro.harness import timing

    calls = []
    run = timing.time_protocol({"f": lambda: calls.append(1)}, "cpu", "ptxbench", nvml=None)
    st = run.stats["f"]
    assert run.protocol == "ptxbench" and run.reps["f"] == 150 and st.n == 150
    assert len(calls) == 3 * (10 + 50) and len(st.trials_ms) == 3
    assert st.median_ms == pytest.approx(sum(st.trials_ms) / 3)


def test_unknown_profile_is_one_line(tmp_path, capsys):
    rc = main(["bench", SUITE, "--path", str(DATA), "--profile", "fast", "--db", str(tmp_path / "r.db")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "--profile 'fast': choose kernelpro or ptxbench" in err


def test_reference_bench_on_cpu_under_both_profiles(tmp_path, capsys):
    rc = main(["bench", SUITE, "--path", str(DATA), "--solutions", "reference", "--task", "gemm_n256_k512",
               "--device", "cpu", "--baselines", "eager", "--trials", "1", "--no-energy", "--json",
               "--profile", "kernelpro,ptxbench", "--db", str(tmp_path / "r.db")])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    rows = {r["profile"]: r for r in rep["rows"]}
    assert set(rows) == {"kernelpro", "ptxbench"} and all(r["correct"] for r in rows.values())
    assert rows["ptxbench"]["protocol"] == "ptxbench" and rows["kernelpro"]["protocol"] == "isolated"
    assert any("PTXBench" in t for t in rep["tolerance"])


@needs_build
def test_kernel_cu_builds_with_nvcc_and_tvm_ffi_and_its_run_is_exported(tmp_path):
    from kernelpro.suites import tvmffi

    sol = write_solutions(tmp_path / "sol", "honest")
    bundle = json.loads((sol / "gemm_n256_k512" / "solution.json").read_text())
    so = tvmffi.shared_library("gemm_test", {s["path"]: s["content"] for s in bundle["sources"]}, arch="sm_90a")
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "__tvm_ffi_run" in syms
    fn = tvmffi.build_module("gemm_test", {s["path"]: s["content"] for s in bundle["sources"]})
    x = torch.zeros(8, 512, dtype=torch.bfloat16)
    # CPU tensors reach the kernel's own launcher, which needs the driver: its TVM-FFI error comes back
    with pytest.raises(Exception, match="hopper GEMM"):
        fn(x, torch.zeros(256, 512, dtype=torch.bfloat16), torch.zeros(8, 256, dtype=torch.bfloat16))


def test_nvcc_error_is_one_line(tmp_path):
    from kernelpro.suites import tvmffi

    if not (HAVE_NVCC and HAVE_FFI):
        pytest.skip("needs nvcc and apache-tvm-ffi")
    with pytest.raises(tvmffi.BuildError) as e:
        tvmffi.shared_library("broken", {"kernel.cu": "void run( {"}, arch="sm_90a")
    assert "\n" not in str(e.value) and "nvcc failed for sm_90a" in str(e.value)


@needs_build
@pytest.mark.parametrize("variant, definition, verdict", [
    ("honest", "gemm_n256_k512", {"tma": "emitted", "wgmma": "emitted"}),
    ("wrong", "gemm_n256_k512", {"tma": "absent", "wgmma": "absent"}),
    ("simt", "gemm_n256_k512", {"tma": "absent", "wgmma": "absent"}),
    ("honest", "mha_with_lse_d128_test", {"tma": "emitted", "wgmma": "emitted"}),
    ("simt", "mha_with_lse_d128_test", {"tma": "absent", "wgmma": "absent"}),
    ("honest", "mha_bwd_d128_test", {"tma": "emitted", "wgmma": "emitted"}),
])
def test_static_verdicts_from_the_solutions_own_cubin(tmp_path, variant, definition, verdict):
    from kernelpro.static.verify import verify_task_candidate

    task = _tasks()[definition]
    cand = get_suite(SUITE).solution_for(task, str(write_solutions(tmp_path / "sol", variant)))
    rep = verify_task_candidate(task, cand, "sm_90a")
    assert rep.compiled and rep.features == verdict and rep.passed == (variant == "honest")
    assert any("tvm_ffi" in s["label"] for s in rep.sources)


@needs_build
def test_verify_takes_a_kernel_cu_as_is(tmp_path, capsys):
    sol = write_solutions(tmp_path / "sol", "simt")
    rc = main(["verify", str(sol / "gemm_n256_k512" / "kernel.cu"), "--arch", "sm_90a", "--features", "wgmma",
               "--json", "--db", str(tmp_path / "r.db")])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 1 and rep["compiled"] and rep["features"] == {"wgmma": "absent"}


@needs_build
def test_bench_without_gpu_verifies_the_solutions_statically(tmp_path, capsys):
    from kernelpro.toolchain import no_gpu_reason

    if no_gpu_reason() is None:
        pytest.skip("this machine has a GPU")
    sol = write_solutions(tmp_path / "sol", "honest")
    rc = main(["bench", SUITE, "--path", str(DATA), "--solutions", str(sol), "--arch", "sm_90a", "--json",
               "--db", str(tmp_path / "r.db")])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    rows = {r["task"].split("/")[-1]: r for r in rep["rows"]}
    assert set(rows) == {"gemm_n256_k512", "mha_with_lse_d128_test", "mha_bwd_d128_test"}
    assert all(r["features_ok"] is True and r["compiled"] for r in rows.values())


@pytest.mark.gpu
@needs_build
def test_bench_judges_the_three_gemm_solutions_on_the_gpu(tmp_path, capsys):
    got = {}
    for variant in ("honest", "wrong", "simt"):
        sol = write_solutions(tmp_path / variant, variant)
        rc = main(["bench", SUITE, "--path", str(DATA), "--solutions", str(sol), "--task", "gemm_n256_k512",
                   "--arch", "sm_90a", "--baselines", "eager", "--no-energy", "--executed", "off", "--json",
                   "--profile", "kernelpro,ptxbench", "--db", str(tmp_path / "r.db")])
        assert rc == 0
        got[variant] = {r["profile"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert all(r["correct"] for r in got["honest"].values())
    assert all(r["correct"] is False and r["reason"] == "wrong_output" for r in got["wrong"].values())
    assert all(r["correct"] and r["features_ok"] is False for r in got["simt"].values())


@pytest.mark.gpu
@needs_build
def test_bench_judges_the_honest_backward_bundle_correct_on_the_gpu(tmp_path, capsys):
    # the binding computes delta = rowsum(dO * O) itself and keeps the dQ scratch between calls
    sol = write_solutions(tmp_path / "honest", "honest")
    rc = main(["bench", SUITE, "--path", str(DATA), "--solutions", str(sol), "--task", "mha_bwd_d128_test",
               "--arch", "sm_90a", "--baselines", "eager", "--no-energy", "--executed", "off", "--json",
               "--profile", "kernelpro,ptxbench", "--db", str(tmp_path / "r.db")])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["correct"] and r["features_ok"] for r in rows), rows


@pytest.mark.gpu
def test_cudnn_frontend_backward_matches_the_reference(tmp_path):
    pytest.importorskip("cudnn", reason="needs nvidia-cudnn-frontend (pip install 'kernelpro[cudnn]')")
    from kernelpro.harness.sdpa import cudnn_sdpa
    from kernelpro.suites.task import instantiate

    t = _tasks()["mha_bwd_d128_test"]
    _, model, inputs = instantiate(t, t.sizes("default")[0], device="cuda")
    q, k, v = inputs[:3]
    # a consistent forward (O, LSE) for the backward, from the reference math
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / 128 ** 0.5
    lse = torch.logsumexp(s, -1)
    o = torch.matmul(torch.softmax(s, -1), v.float()).to(q.dtype)
    args = [q, k, v, o, inputs[4], lse]
    call = cudnn_sdpa("backward", False, args)
    call()
    torch.cuda.synchronize()
    ref = model(*args)
    for got, want in zip(call.outputs, ref, strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@needs_build
@pytest.mark.parametrize("kind, macro", [("attn_fwd", "ATTN_CAUSAL"), ("attn_bwd", "BWD_CAUSAL")])
def test_causal_reference_bundles_set_their_macro_before_the_kernel_and_build(tmp_path, kind, macro):
    # PTXBench's causal headline definitions get the same binding with the kernel's causal macro first
    from kernelpro.suites import tvmffi
    from tests.flashinfer_kernels import honest_bundle

    b = honest_bundle(f"mha_{kind}_causal", kind, causal=True)
    src = {s["path"]: s["content"] for s in b["sources"]}
    assert src["kernel.cu"].startswith(f"#define {macro} 1\n")
    so = tvmffi.shared_library(f"{kind}_causal", src, arch="sm_90a")
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "__tvm_ffi_run" in syms
    with pytest.raises(ValueError, match="no causal form"):
        honest_bundle("gemm_x", "gemm", causal=True)


def _bf16_kernel_backward(q, k, v, o, do, lse):
    """A FlashAttention-style backward's numerics on the CPU: bf16 inputs, fp32 accumulation, P and dS rounded
    to bf16 for their matmuls (as the Hopper reference's wgmma operands are)."""
    bf = torch.bfloat16
    q, k, v, o, do = (t.float() for t in (q, k, v, o, do))
    scale = 1.0 / q.shape[-1] ** 0.5
    p = torch.exp(torch.matmul(q, k.transpose(-1, -2)) * scale - lse.unsqueeze(-1)).to(bf).float()
    dv = torch.matmul(p.transpose(-1, -2), do)
    dp = torch.matmul(do, v.transpose(-1, -2))
    ds = (p * (dp - (do * o).sum(-1, keepdim=True))).to(bf).float()
    return (torch.matmul(ds, k) * scale).to(bf), (torch.matmul(ds.transpose(-1, -2), q) * scale).to(bf), dv.to(bf)


def test_backward_workloads_draw_o_and_lse_from_a_forward_of_the_same_set():
    # random O and LSE left P = exp(S - LSE) unnormalised and failed an honest bf16 kernel on an H100
    from kernelpro.suites.task import instantiate

    t = _tasks()["mha_bwd_d128_test"]
    size = t.sizes("default")[0]
    _, model, (q, k, v, o, do, lse) = instantiate(t, size)
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / 128 ** 0.5
    assert lse.dtype == torch.float32 and torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-5)
    assert o.dtype == torch.bfloat16
    assert torch.allclose(o.float(), torch.matmul(torch.softmax(s, -1), v.float()), atol=1e-2)
    _, _, again = instantiate(t, size, seed=1)
    assert not torch.equal(again[0], q) and not torch.equal(again[3], o)   # each set fresh, not one fixed O


def test_an_honest_bf16_backward_passes_the_test_definition_and_fails_random_o_and_lse():
    from kernelpro.harness.profiles import PTXBENCH_TOLERANCE
    from kernelpro.harness.tensors import error_stats
    from kernelpro.suites.task import instantiate

    t = _tasks()["mha_bwd_d128_test"]
    _, model, inputs = instantiate(t, t.sizes("default")[0])
    for tol in (t.tolerance, PTXBENCH_TOLERANCE):
        for got, want in zip(_bf16_kernel_backward(*inputs), model(*inputs), strict=True):
            assert error_stats(got, want, tol)["ok"], error_stats(got, want, tol)
    torch.manual_seed(0)
    bad = [*inputs[:3], torch.randn_like(inputs[3]), inputs[4], torch.randn_like(inputs[5])]
    assert not all(error_stats(g, w, t.tolerance)["ok"]
                   for g, w in zip(_bf16_kernel_backward(*bad), model(*bad), strict=True))


def test_the_causal_forward_for_backward_inputs_masks_keys_after_the_query():
    from kernelpro.suites.flashinfer import _forward_o_lse

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1500, 64, dtype=torch.bfloat16) for _ in range(3))   # two row blocks
    o, lse = _forward_o_lse(q, k, v, causal=True)
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / 8.0
    s = s.masked_fill(torch.ones(1500, 1500, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-4)
    assert torch.allclose(o, torch.matmul(torch.softmax(s, -1), v.float()), atol=1e-4)


def _blob_trace_set(tmp_path: Path) -> Path:
    """The test backward definition with one workload whose six inputs are a safetensors blob (random Q, K,
    V, dO; O and LSE from their forward), as PTXBench ships its headline backward workloads."""
    from safetensors.torch import save_file

    from kernelpro.suites.flashinfer import _forward_o_lse

    root = tmp_path / "trace"
    (root / "definitions" / "attention").mkdir(parents=True)
    (root / "workloads" / "attention").mkdir(parents=True)
    (root / "blob").mkdir()
    name = "mha_bwd_d128_test"
    shutil.copy(DATA / "definitions" / "attention" / f"{name}.json", root / "definitions" / "attention")
    g = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(2, 4, 64, 128, generator=g).to(torch.bfloat16) for _ in range(4))
    o, lse = _forward_o_lse(q, k, v, causal=False)
    save_file({"Q": q, "K": k, "V": v, "O": o.to(torch.bfloat16), "dO": do, "L": lse.contiguous()},
              str(root / "blob" / "s64.safetensors"))
    inputs = {n: {"type": "safetensors", "path": "blob/s64.safetensors", "tensor_key": n}
              for n in ("Q", "K", "V", "O", "dO", "L")}
    line = {"definition": name, "workload": {"uuid": "kp-test-bwd-blob", "axes": {"S": 64}, "inputs": inputs}}
    (root / "workloads" / "attention" / f"{name}.jsonl").write_text(json.dumps(line) + "\n")
    return root


needs_safetensors = pytest.mark.skipif(importlib.util.find_spec("safetensors") is None,
                                       reason="needs the safetensors package (pip install safetensors)")


@needs_safetensors
def test_a_backward_blob_is_the_first_trials_data_and_every_other_draw_is_fresh_and_consistent(tmp_path):
    # a blob gives every draw the same tensors: a candidate that knows (or caches) its answer is right on
    # every call; backward blobs hold nothing a random draw cannot remake, so the probes get fresh sets
    from kernelpro.suites.task import instantiate

    t = {x.name: x for x in get_suite(SUITE).tasks(path=str(_blob_trace_set(tmp_path)))}["mha_bwd_d128_test"]
    mod, _, own = instantiate(t, t.sizes("default")[0])
    _, _, own_again = instantiate(t, t.sizes("default")[0], seed=5)
    assert all(torch.equal(a, b) for a, b in zip(own, own_again, strict=True))    # the blob, whatever the seed
    torch.manual_seed(1)
    fresh = mod.get_fresh_inputs()
    torch.manual_seed(2)
    fresh2 = mod.get_fresh_inputs()
    assert not torch.equal(fresh[0], own[0]) and not torch.equal(fresh[0], fresh2[0])
    q, k, v, o, _, lse = fresh
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / 128 ** 0.5
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-5)            # O and LSE made by a forward
    assert torch.allclose(o.float(), torch.matmul(torch.softmax(s, -1), v.float()), atol=1e-2)
    assert [x.dtype for x in fresh] == [x.dtype for x in own] and [x.shape for x in fresh] == [x.shape for x in own]


BLOB_ANSWERS = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    # keeps the answer of its first call (the blob's) and returns it for every later call
    def __init__(self):
        super().__init__()
        self.answer = None
    def forward(self, *inputs):
        if self.answer is None:
            self.answer = tuple(t.clone() for t in REFERENCE()(*inputs))
        return tuple(t.clone() for t in self.answer)
"""
BLOB_AWARE = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    # adapts: answers right only on data it recognises as the blob (its first call's Q), zeros otherwise
    def __init__(self):
        super().__init__()
        self.q = self.answer = None
    def forward(self, *inputs):
        if self.answer is None:
            self.q, self.answer = inputs[0].clone(), tuple(t.clone() for t in REFERENCE()(*inputs))
        if torch.equal(inputs[0], self.q):
            return tuple(t.clone() for t in self.answer)
        return tuple(torch.zeros_like(t) for t in self.answer)
"""


@needs_safetensors
@pytest.mark.parametrize("candidate", ["honest", "blob_answers", "blob_aware"])
def test_a_candidate_answering_from_the_blob_is_caught_and_an_honest_one_passes_without_a_warning(tmp_path, candidate):
    from tests.inprocess import evaluate_in_process

    t = {x.name: x for x in get_suite(SUITE).tasks(path=str(_blob_trace_set(tmp_path)))}["mha_bwd_d128_test"]
    cand = tmp_path / "cand.py"
    head = f"import importlib.util as _u\n_s = _u.spec_from_file_location('kp_ref_task', {str(t.path)!r})\n" \
           "_m = _u.module_from_spec(_s)\n_s.loader.exec_module(_m)\nREFERENCE = _m.Model\n"
    if candidate == "honest":
        cand.write_text(head + "class ModelNew(REFERENCE):\n    pass\n")
    else:
        cand.write_text(head + (BLOB_ANSWERS if candidate == "blob_answers" else BLOB_AWARE))
    r = evaluate_in_process(t.path, cand, suite=SUITE, trials=2, timeout_s=120)
    names = {c["name"] for c in r["checks"]}
    assert "fixed_inputs" not in names, r["warnings"]
    if candidate == "honest":
        assert r["status"] == "passed", (r["reason"], r["detail"])
    else:
        assert r["status"] == "failed" and r["reason"] in ("output_cached", "wrong_output"), (r["reason"], r["detail"])


@pytest.mark.parametrize("causal", [False, True])
def test_the_forward_for_backward_inputs_is_exact_across_batches_heads_and_a_ragged_row_block(causal):
    # fresh backward sets (a blob's redraws included) take O and LSE from this forward, block by block
    from kernelpro.suites.flashinfer import _forward_o_lse

    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 1100, 64, dtype=torch.bfloat16) for _ in range(3))
    o, lse = _forward_o_lse(q, k, v, causal=causal)
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / 8.0
    if causal:
        s = s.masked_fill(torch.ones(1100, 1100, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-4)
    assert torch.allclose(o, torch.matmul(torch.softmax(s, -1), v.float()), atol=1e-4)
