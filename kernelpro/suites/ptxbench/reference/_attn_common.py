"""Shared loader for the attention-forward references: ``hopper_attn_fwd.cu`` on Hopper (sm_90a),
``blackwell_attn_fwd.cu`` on Blackwell (sm_100a), picked by ``target_arch()``.

The Blackwell kernel (tcgen05.mma for Q K^T and P V with S and O in tensor memory, a TMA K/V ring on
mbarriers, online softmax in four warps that own one query row each) is compiled and statically
verified only: no B200 was available, so it has never run. Its macros are ``ATTN_CAUSAL``,
``ATTN_WITH_LSE`` and ``ATTN_STAGES`` (1 or 2).

The Hopper source is specialised by nvcc ``-D`` macros: ``ATTN_CAUSAL``, ``ATTN_WITH_LSE``,
``ATTN_HEAD_DIM`` (64 or 128), ``ATTN_CONSUMERS`` (consumer warpgroups; BLOCK_M = 64 * CONSUMERS), ``ATTN_BLOCK_N`` (key tile, 128),
``ATTN_STAGES`` (K/V ring depth), ``ATTN_OVERLAP`` (S/PV overlap inside a warpgroup) and
``ATTN_WATCHDOG`` (trap after that many failed barrier polls; 0 = off, the default, because the trap
path costs the consumers their setmaxnreg register budget). Each combination is built once per
process with ``torch.utils.cpp_extension.load_inline``; the extension name carries a hash of the source
and the macros, so an edited kernel never reuses a stale build.

The ModelNew files next to this one load it by path (``load_common()``), so they work whether or not
``kernelpro`` is importable as a package. They are parameter-search templates too: ``PARAMS`` (the
tunable macros below), ``make_candidate`` (a standalone candidate with this file and the kernel
embedded), and the rules (``validate``, ``LADDERS``, ``ADVICE``) mirroring the kernel's static_asserts.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import torch

CU_PATH = Path(__file__).with_name("hopper_attn_fwd.cu")
HEAD_DIMS = (64, 128)
DEFAULTS = {"ATTN_HEAD_DIM": 128, "ATTN_CONSUMERS": 2, "ATTN_BLOCK_N": 128, "ATTN_STAGES": 2, "ATTN_OVERLAP": 1, "ATTN_WATCHDOG": 0}
NVCC_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17"]
BW_CU_PATH = Path(__file__).with_name("blackwell_attn_fwd.cu")
BW_HEADER = Path(__file__).with_name("blackwell_tcgen05.cuh")
BW_DEFAULTS = {"ATTN_STAGES": 2}
BW_NVCC_FLAGS = ["-gencode=arch=compute_100a,code=sm_100a", "-O3", "-std=c++17"]
# The static verifier sets this to the target it compiles for (the build process has no GPU to ask).
TARGET_ARCH_ENV = "KERNELPRO_TARGET_ARCH"


def target_arch() -> str:
    """sm_100a or sm_90a: the verifier's target, else the GPU's, else TORCH_CUDA_ARCH_LIST's first entry
    (what the build stage pins to the run's GPU), else sm_90a."""
    arch = os.environ.get(TARGET_ARCH_ENV, "")
    if not arch and torch.cuda.is_available():
        major, _ = torch.cuda.get_device_capability()
        arch = "sm_100a" if major == 10 else "sm_90a"
    if not arch:
        first = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()
        arch = "sm_100a" if first and first[0].startswith("10.") else "sm_90a"
    return arch


def blackwell() -> bool:
    return target_arch().startswith("sm_100")


def cuda_source() -> str:
    """The kernel source for the target (Blackwell's with its shared header inlined, so it stands alone)."""
    if blackwell():
        return BW_CU_PATH.read_text().replace('#include "blackwell_tcgen05.cuh"', BW_HEADER.read_text())
    return CU_PATH.read_text()

# The torch-facing wrapper; the .cu itself has no PyTorch headers so it also builds with plain nvcc.
CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

const char* kp_attn_fwd_launch(const void* q, const void* k, const void* v, void* o, float* lse, int bh,
                               int seq, int head_dim, float softmax_scale, cudaStream_t stream);

void attn_fwd_into(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor out, torch::Tensor lse,
                   double softmax_scale) {
  for (const auto* t : {&q, &k, &v, &out}) {
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == torch::kBFloat16 && t->is_contiguous() && t->dim() == 4,
                "attention reference: q, k, v, out must be contiguous 4-D bf16 CUDA tensors (B, H, S, D)");
    TORCH_CHECK(t->sizes() == q.sizes(), "attention reference: q, k, v, out must have the same shape");
  }
  TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "attention reference: head dim must be 64 or 128, got ",
              q.size(3));
  const int64_t bh = q.size(0) * q.size(1), seq = q.size(2);
  TORCH_CHECK(bh <= 65535 && seq <= (1LL << 30), "attention reference: B*H must be <= 65535");
  float* lse_ptr = nullptr;
  if (lse.numel() > 0) {
    TORCH_CHECK(lse.is_cuda() && lse.scalar_type() == torch::kFloat32 && lse.is_contiguous() &&
                    lse.numel() == bh * seq,
                "attention reference: lse must be a contiguous fp32 CUDA tensor of B*H*S elements");
    lse_ptr = lse.data_ptr<float>();
  }
  const c10::cuda::CUDAGuard guard(q.device());
  const char* err = kp_attn_fwd_launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse_ptr,
                                       static_cast<int>(bh), static_cast<int>(seq), static_cast<int>(q.size(3)),
                                       static_cast<float>(softmax_scale),
                                       c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "attention reference kernel: ", err ? err : "");
}
"""

_BUILT: dict[str, object] = {}


def for_target(params: dict[str, int]) -> dict[str, int]:
    """The template's PARAMS for the kernel the target builds: they are the Hopper kernel's knobs, so the
    Blackwell kernel (its own macros, defaults in BW_DEFAULTS) gets none of them."""
    return {} if blackwell() else dict(params)


def macros(causal: bool, with_lse: bool, **overrides: int) -> dict[str, int]:
    defaults = BW_DEFAULTS if blackwell() else DEFAULTS
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown attention macros {unknown} for {target_arch()}; valid: {sorted(defaults)}")
    m = {"ATTN_CAUSAL": int(causal), "ATTN_WITH_LSE": int(with_lse)}
    m.update(defaults)
    m.update({k: int(v) for k, v in overrides.items()})
    return m


_BY_MACROS: dict[tuple, object] = {}


def _cu_source() -> str:
    # A generated candidate embeds the kernel (EMBEDDED_CU_SRC) so it builds wherever it is written.
    return globals().get("EMBEDDED_CU_SRC") or cuda_source()


def build(causal: bool, with_lse: bool, **overrides: int):
    """Compile (once per source + macros) and return the extension module."""
    m = macros(causal, with_lse, **overrides)
    flags = BW_NVCC_FLAGS if blackwell() else NVCC_FLAGS
    fast = (flags[0], *sorted(m.items()))
    if fast in _BY_MACROS:  # per-call path: no file read or hashing in front of every launch
        return _BY_MACROS[fast]
    src = _cu_source()
    defines = [f"-D{k}={v}" for k, v in sorted(m.items())]
    key = hashlib.sha256((src + "\n" + CPP_SRC + "\n" + " ".join([*flags, *defines])).encode()).hexdigest()[:16]
    if key not in _BUILT:
        from torch.utils.cpp_extension import load_inline

        _BUILT[key] = load_inline(
            name=f"kp_attn_fwd_{key}",
            cpp_sources=CPP_SRC,
            cuda_sources=src,
            functions=["attn_fwd_into"],
            # An explicit -gencode keeps torch from adding a plain sm_90/sm_100 pass, which rejects
            # wgmma/tcgen05 (arch-specific instructions need the "a" targets).
            extra_cuda_cflags=[*flags, *defines],
            verbose=False,
        )
    _BY_MACROS[fast] = _BUILT[key]
    return _BUILT[key]


def attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, with_lse: bool,
                 **overrides: int):
    """SDPA forward with scale 1/sqrt(D): ``out`` or ``(out, lse)`` (lse fp32, natural log); the build is
    the one for q's head dim unless ``ATTN_HEAD_DIM`` is given."""
    if not blackwell():      # the Blackwell kernel has one head dim (128), checked by its launcher
        overrides.setdefault("ATTN_HEAD_DIM", q.shape[-1])
        if overrides["ATTN_HEAD_DIM"] not in HEAD_DIMS:
            raise ValueError(f"attention reference: head dim must be one of {HEAD_DIMS}, got {q.shape[-1]}")
    ext = build(causal, with_lse, **overrides)
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    b, h, s, _ = q.shape
    lse = torch.empty((b, h, s) if with_lse else (0,), device=q.device, dtype=torch.float32)
    ext.attn_fwd_into(q, k, v, out, lse, 1.0 / math.sqrt(q.shape[-1]))
    return (out, lse) if with_lse else out


# ---- parameter-search template (kernelpro.agent.policy_param) ----
# The tunable macros and the rules of hopper_attn_fwd.cu's static_asserts: CONSUMERS in {2, 3}
# (BLOCK_M = 64 * CONSUMERS), STAGES in {2, 3}, 1024 + Q tile + 2 * STAGES K/V tiles + barriers within
# 227 KB (so 3 consumers take 2 stages), OVERLAP in {0, 1}. BLOCK_N is fixed at 128 (the S = Q K^T wgmma
# is written for n128). The register split follows CONSUMERS inside the kernel.

SMEM_LIMIT = 232448
PARAMS = {"ATTN_CONSUMERS": 2, "ATTN_STAGES": 2, "ATTN_OVERLAP": 1}
# The untuned shape (no S/PV overlap, the shallowest ring) where `kernelpro ablate` starts.
GENERIC_START = {"ATTN_CONSUMERS": 2, "ATTN_STAGES": 2, "ATTN_OVERLAP": 0}
LADDERS = {"ATTN_CONSUMERS": [2, 3], "ATTN_STAGES": [2, 3], "ATTN_OVERLAP": [0, 1]}

# What each stage-two finding argues for: (tool, regex over the finding's title, knob, direction, weight, why).
ADVICE = [
    ("warp_stalls", r"barrier|long_scoreboard|mbarrier", "ATTN_STAGES", +1, 2.0,
     "consumers wait on a K/V tile's full barrier: a third ring stage has it loaded ahead"),
    ("warp_stalls", r"barrier|long_scoreboard|mbarrier", "ATTN_OVERLAP", +1, 1.0,
     "issuing S(j+1) before the softmax of tile j hides the wgmma latency"),
    ("occupancy", r"shared memory", "ATTN_STAGES", -1, 2.0, "each K/V stage is 64 KB of shared memory"),
    ("occupancy", r"shared memory", "ATTN_CONSUMERS", -1, 1.0, "a 128-row Q tile takes 32 KB, a 192-row one 48 KB"),
    ("occupancy", r"grid too small", "ATTN_CONSUMERS", -1, 2.0, "128-row query blocks make 1.5x the CTAs of 192-row ones"),
    ("tail_effect", r"", "ATTN_CONSUMERS", -1, 1.5, "smaller query blocks even out the last wave"),
    ("spills", r"", "ATTN_CONSUMERS", -1, 2.0, "two consumers get 240 registers each, three only 160"),
    ("spills", r"", "ATTN_OVERLAP", -1, 1.0, "the overlap keeps a second score tile live in registers"),
    ("tensor_core", r"busy only", "ATTN_OVERLAP", +1, 2.0, "overlapping S and PV keeps the tensor pipe issuing"),
    ("tensor_core", r"busy only", "ATTN_CONSUMERS", +1, 1.0, "a third consumer warpgroup issues more MMAs per K/V tile"),
    ("dram_bandwidth", r"", "ATTN_CONSUMERS", +1, 1.5, "a taller query block reads each K/V tile for more rows"),
]


def validate(p: dict) -> str | None:
    """Why ``p`` breaks one of hopper_attn_fwd.cu's static_asserts; None if valid."""
    c, st, ov = p.get("ATTN_CONSUMERS", 2), p.get("ATTN_STAGES", 2), p.get("ATTN_OVERLAP", 1)
    if c not in (2, 3):
        return "ATTN_CONSUMERS must be 2 or 3 (BLOCK_M = 128 or 192)"
    if st not in (2, 3):
        return "ATTN_STAGES must be 2 or 3"
    if ov not in (0, 1):
        return "ATTN_OVERLAP is 0 or 1"
    smem = 1024 + 2 * 64 * c * 128 + 2 * st * 2 * 128 * 128 + 8 * (1 + 3 * st)
    if smem > SMEM_LIMIT:
        return f"Q tile + {st} K/V stages need {smem} bytes of shared memory, over 227 KB"
    return None


def repair(p: dict) -> dict:
    """Coupled knobs after a move: a 192-row query block leaves room for two K/V stages only."""
    q = dict(p)
    if q.get("ATTN_CONSUMERS") == 3 and q.get("ATTN_STAGES", 2) > 2:
        q["ATTN_STAGES"] = 2
    return q


def make_candidate(task: str, causal: bool, with_lse: bool, params: dict) -> str:
    """A standalone candidate .py for ``params`` (merged over PARAMS): this file and the kernel embedded."""
    merged = {**PARAMS, **params}
    unknown = sorted(set(merged) - set(PARAMS))
    if unknown:
        raise ValueError(f"unknown PARAMS keys {unknown}; valid keys: {list(PARAMS)}")
    quotes = "'" * 3            # spelt out so that this file itself stays embeddable
    common, cu = Path(__file__).read_text(), CU_PATH.read_text()
    if quotes in common or quotes in cu:
        raise ValueError("the attention sources cannot be embedded in raw triple-quoted strings")
    params_text = "{\n" + "".join(f'    "{k}": {int(v)},\n' for k, v in merged.items()) + "}"
    return (
        f'"""{task} candidate generated from the KernelPro Hopper reference (hopper_attn_fwd.cu)."""\n\n'
        "from __future__ import annotations\n\nimport sys\nimport types\n\nimport torch.nn as nn\n\n"
        # Hopper-only: the embedded kernel is the wgmma one, so the verifier never builds it for sm_100a.
        'ARCHS = {"sm_90a": "wgmma"}\n\n'
        f"PARAMS = {params_text}\nCAUSAL = {bool(causal)}\nWITH_LSE = {bool(with_lse)}\n\n"
        f"_CU_SRC = r{quotes}{cu}{quotes}\n\n_COMMON_SRC = r{quotes}{common}{quotes}\n\n"
        + _CANDIDATE_BODY)


_CANDIDATE_BODY = """
def _common():
    name = "kp_attn_common_embedded"
    if name not in sys.modules:
        mod = types.ModuleType(name)
        mod.__dict__.update(__file__="_attn_common.py", EMBEDDED_CU_SRC=_CU_SRC)
        exec(compile(_COMMON_SRC, "_attn_common.py", "exec"), mod.__dict__)  # noqa: S102 - our own source
        sys.modules[name] = mod
    return sys.modules[name]


def _build(params: dict):
    return _common().build(CAUSAL, WITH_LSE, **params)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _build(PARAMS)   # built with the model: the compile stays out of the first timed call

    def forward(self, q, k, v):
        return _common().attn_forward(q, k, v, causal=CAUSAL, with_lse=WITH_LSE, **PARAMS)
"""
