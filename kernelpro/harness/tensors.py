"""Tensor helpers of the checks: flatten/clone of nested outputs, raw bits, the poison pattern, storage
overlap, fingerprints and the tolerance test (error_stats)."""

from __future__ import annotations

import math
from typing import Any

import torch


def flatten(x: Any) -> list[Any]:
    if isinstance(x, list | tuple):
        return [y for item in x for y in flatten(item)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in flatten(x[k])]
    return [x]


def clone_tree(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, list | tuple):
        return type(x)(clone_tree(y) for y in x)
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_POISON = {1: 255, 2: -1, 4: -1, 8: -1}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as an integer tensor of the same element size (contiguous copy if needed)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(_INT_OF_SIZE[t.element_size()])


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits(a), bits(b)))


def poison_mask(t: torch.Tensor) -> torch.Tensor:
    return bits(t) == _POISON[t.element_size()]


def poison_allocator(nbytes_list: list[int], device: str) -> None:
    """Leave freed blocks of exactly these sizes, filled with all-ones bytes, at the top of the allocator."""
    keep = []
    for _ in range(2):
        for n in nbytes_list:
            b = torch.empty(max(int(n), 1), dtype=torch.uint8, device=device)
            b.fill_(255)
            keep.append(b)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    del keep


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = storage_span(a), storage_span(b)
    return a1 > a0 and b1 > b0 and a0 < b1 and b0 < a1


def fingerprint(t: torch.Tensor) -> tuple:
    b = bits(t).flatten()
    return (tuple(t.shape), str(t.dtype), float(b.to(torch.float64).sum()), tuple(b[:16].tolist()),
            tuple(b[-16:].tolist()))


def error_stats(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, Any]) -> dict[str, Any]:
    """Elementwise atol/rtol and relative-norm error, in float64; NaN/Inf and poison counted separately.
    `tol["elementwise"] == "abs_and_rel"` (the ptxbench profile) applies PTXBench's elementwise rule."""
    poison = poison_mask(out) & ~poison_mask(ref)
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    ref_finite = torch.isfinite(r)
    nonfinite = (~torch.isfinite(o)) & ref_finite & ~poison
    both = ref_finite & torch.isfinite(o)
    diff = torch.where(both, (o - r).abs(), torch.zeros_like(o))
    if tol.get("elementwise") == "abs_and_rel":
        # PTXBench's rule: wrong only where both the absolute and the relative error are past their bound
        within = (diff <= tol["atol"]) | (diff / (r.abs() + 1e-8) <= tol["rtol"])
        bad = ~within & both | (~torch.isfinite(o) & ref_finite)
    else:
        bad = (diff > tol["atol"] + tol["rtol"] * r.abs()) | (~torch.isfinite(o) & ref_finite)
    rn = torch.where(ref_finite, r, torch.zeros_like(r))
    denom = float(torch.linalg.vector_norm(rn)) or 1e-30
    rel = float(torch.linalg.vector_norm(diff)) / denom
    n = max(out.numel(), 1)
    # The smallest t with allclose(out, ref, atol=t, rtol=t): what any other equal-atol/rtol rule would say.
    need = float((diff / (1 + r.abs().nan_to_num(posinf=0.0))).max()) if diff.numel() else 0.0
    if int(nonfinite.sum()) or int(poison.sum()):
        need = math.inf
    return {"max_abs": float(diff.max()) if diff.numel() else 0.0, "rel_norm": rel, "tol_needed": need,
            "mismatch": float(bad.sum()) / n, "poisoned": int(poison.sum()), "nonfinite": int(nonfinite.sum()),
            "ok": bool(rel <= tol["rel_norm"] and int(bad.sum()) == 0)}
