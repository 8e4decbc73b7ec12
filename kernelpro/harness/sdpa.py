"""Attention baselines a task can name (`--baselines cudnn_frontend,torch_sdpa`; tasks that declare META
`sdpa`): the cuDNN frontend's SDPA graph, as PTXBench takes its attention baseline, and PyTorch's fused
SDPA op. Each returns a zero-argument call over the task's own inputs, built (graph, plans, workspace,
outputs) before timing so a call does the attention work alone.

Inputs as PTXBench's definitions order them, (B, H, S, D) contiguous: forward (Q, K, V); backward
(Q, K, V, O, dO, LSE) with LSE (B, H, S) or (B, H, S, 1) fp32, the natural log of the scaled scores'
sum of exponentials. The scale is 1/sqrt(D).

cuDNN frontend (PyPI `nvidia-cudnn-frontend`, import `cudnn`), as its documentation gives the graph API:
`cudnn.pygraph(io_data_type, intermediate_data_type=FLOAT, compute_data_type=FLOAT)`, tensors from
`tensor_like`, `sdpa(q, k, v, attn_scale, use_causal_mask, generate_stats)` -> (O, stats) and
`sdpa_backward(q, k, v, o, dO, stats, attn_scale, use_causal_mask)` -> (dQ, dK, dV), outputs marked with
`set_output(True)` and their dims and strides, then validate, build_operation_graph,
create_execution_plans([heur_mode.A, heur_mode.FALLBACK]), check_support, build_plans, and
`execute({tensor: torch tensor}, workspace)`. PyTorch's backward is autograd through
`scaled_dot_product_attention` (its dispatcher's backend), `torch.autograd.grad(O, (Q, K, V), dO)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kernelpro.errors import KernelProError

EXTRA = "cudnn"   # the pyproject extra that installs nvidia-cudnn-frontend


def _split(direction: str, args: list[Any]) -> tuple[Any, ...]:
    want = 3 if direction == "forward" else 6
    if len(args) != want:
        raise KernelProError(f"sdpa {direction}: expected {want} inputs (Q, K, V" +
                             (", O, dO, LSE)" if want == 6 else ")") + f", got {len(args)}")
    q = args[0]
    if q.dim() != 4 or any(a.shape != q.shape for a in args[1:5]):
        raise KernelProError(f"sdpa {direction}: Q, K, V{', O, dO' if want == 6 else ''} must share one "
                             f"(B, H, S, D) shape, got {[tuple(a.shape) for a in args]}")
    return tuple(args)


def _cudnn() -> Any:
    try:
        import cudnn
    except ImportError as e:
        raise KernelProError(f"the cudnn_frontend baseline needs nvidia-cudnn-frontend: pip install "
                             f"'kernelpro[{EXTRA}]' ({e})") from None
    return cudnn


def _dtype(cudnn: Any, t: Any) -> Any:
    import torch

    table = {torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16,
             torch.float32: cudnn.data_type.FLOAT}
    if t.dtype not in table:
        raise KernelProError(f"cudnn_frontend: no cuDNN data type for {t.dtype}")
    return table[t.dtype]


def _plans(cudnn: Any, graph: Any) -> None:
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()


def _graph(cudnn: Any, q: Any) -> Any:
    import torch

    handle = cudnn.create_handle()
    # the caller's stream, so the baseline's work is ordered (and timed) like every other function's
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    return cudnn.pygraph(io_data_type=_dtype(cudnn, q), intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, handle=handle)


def cudnn_sdpa(direction: str, causal: bool, args: list[Any]) -> Callable[[], None]:
    """The cuDNN frontend SDPA forward (O and stats) or backward (dQ, dK, dV) over `args`; the call's
    `outputs` attribute holds the tensors it writes."""
    import torch

    cudnn = _cudnn()
    if direction == "forward":
        q, k, v = _split(direction, args)
        b, h, s, d = q.shape
        o = torch.empty_like(q)
        stats = torch.empty((b, h, s, 1), dtype=torch.float32, device=q.device)
        g = _graph(cudnn, q)
        tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
        try:
            to, ts = g.sdpa(name="sdpa", q=tq, k=tk, v=tv, generate_stats=True, attn_scale=1.0 / math.sqrt(d),
                            use_causal_mask=causal)
        except TypeError:   # frontends before generate_stats took is_inference instead
            to, ts = g.sdpa(name="sdpa", q=tq, k=tk, v=tv, is_inference=False, attn_scale=1.0 / math.sqrt(d),
                            use_causal_mask=causal)
        to.set_output(True).set_dim(o.shape).set_stride(o.stride())
        ts.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(stats.shape).set_stride(stats.stride())
        _plans(cudnn, g)
        ws = torch.empty(g.get_workspace_size(), device=q.device, dtype=torch.uint8)
        pack = {tq: q, tk: k, tv: v, to: o, ts: stats}
        outputs: tuple[Any, ...] = (o, stats)
    elif direction == "backward":
        q, k, v, o, do, lse = _split(direction, args)
        d = q.shape[-1]
        lse = (lse.unsqueeze(-1) if lse.dim() == 3 else lse).contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g = _graph(cudnn, q)
        tq, tk, tv, to, tdo, tl = (g.tensor_like(t) for t in (q, k, v, o, do, lse))
        gq, gk, gv = g.sdpa_backward(name="sdpa_backward", q=tq, k=tk, v=tv, o=to, dO=tdo, stats=tl,
                                     attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal)
        for t, real in ((gq, dq), (gk, dk), (gv, dv)):
            t.set_output(True).set_dim(real.shape).set_stride(real.stride())
        _plans(cudnn, g)
        ws = torch.empty(g.get_workspace_size(), device=q.device, dtype=torch.uint8)
        pack = {tq: q, tk: k, tv: v, to: o, tdo: do, tl: lse, gq: dq, gk: dk, gv: dv}
        outputs = (dq, dk, dv)
    else:
        raise KernelProError(f"sdpa direction {direction!r}: forward or backward")

    def call() -> None:
        g.execute(pack, ws)
    call.outputs = outputs   # type: ignore[attr-defined]  # what the graph writes, for checking it
    return call


def torch_sdpa(direction: str, causal: bool, args: list[Any]) -> Callable[[], None]:
    """PyTorch's fused SDPA forward, or its backward through autograd, over `args`."""
    import torch
    import torch.nn.functional as F

    if direction == "forward":
        q, k, v = _split(direction, args)

        def fwd() -> None:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1.0 / math.sqrt(q.shape[-1]))
        return fwd
    if direction != "backward":
        raise KernelProError(f"sdpa direction {direction!r}: forward or backward")
    q, k, v, _o, do, _lse = _split(direction, args)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=1.0 / math.sqrt(q.shape[-1]))

    def bwd() -> None:
        torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    return bwd


BASELINES: dict[str, Callable[[str, bool, list[Any]], Callable[[], None]]] = {
    "cudnn_frontend": cudnn_sdpa, "torch_sdpa": torch_sdpa}
