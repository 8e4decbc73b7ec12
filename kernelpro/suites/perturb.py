"""Parameter and buffer values that are not the ones a fresh module starts with.

A fresh ``nn.LayerNorm`` holds ones and zeros, a fresh ``nn.BatchNorm`` has running mean 0 and variance 1,
so a solution that drops an affine weight, or keeps only one channel of it, matches the reference at its
initial values and is wrong for any trained ones. Before the correctness checks the harness draws new
values for every floating-point parameter and buffer of the reference (seeded, by name and shape) and
loads the same values into the candidate; degenerate-problem detection uses the same draw.

Mapping a reference tensor onto the candidate is by name first (``linear.weight``), then, for names the
candidate does not have, by a unique shape among the candidate's still-unmapped tensors with the same
last name component (``ln.weight`` ~ ``weight``), then by a unique shape alone. Extra candidate
tensors are allowed (a fused kernel's own buffers); a reference tensor that maps nowhere is a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Mapping:
    """How the reference's tensors were found in the candidate."""

    loaded: tuple[tuple[str, str], ...]      # (reference name, candidate name) pairs given new values
    missing: tuple[str, ...]                 # reference tensors with no place in the candidate
    extra: tuple[str, ...]                   # candidate tensors nothing was loaded into

    @property
    def ok(self) -> bool:
        return not self.missing


def _tensors(module: Any) -> dict[str, torch.Tensor]:
    """Floating-point parameters and buffers by qualified name (integer buffers are counters, kept)."""
    if not isinstance(module, torch.nn.Module):
        return {}
    out: dict[str, torch.Tensor] = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t is not None and t.is_floating_point() and t.numel() > 0:
            out[name] = t
    return out


def perturbed_values(module: Any, seed: int) -> dict[str, torch.Tensor]:
    """New values for `module`'s floating-point tensors, drawn from a generator seeded per name.

    Each value keeps the tensor's scale (its mean absolute value, at least 0.05) so activations stay in
    range; a running variance stays positive. The draw depends only on (seed, name, shape), so the same
    reference gets the same values in every process.
    """
    vals: dict[str, torch.Tensor] = {}
    for name, t in _tensors(module).items():
        g = torch.Generator(device="cpu")
        g.manual_seed((seed * 1_000_003 + sum(map(ord, name)) * 7919 + t.numel()) % (2**63 - 1))
        base = t.detach().float().cpu()
        scale = max(float(base.abs().mean()), 0.05)
        if name.endswith("running_var"):
            v = torch.rand(t.shape, generator=g) * 1.5 + 0.5
        else:
            v = base * (torch.rand(t.shape, generator=g) + 0.5) + torch.randn(t.shape, generator=g) * scale * 0.5
        vals[name] = v.to(dtype=t.dtype)
    return vals


def map_tensors(ref: Any, cand: Any) -> tuple[dict[str, str], Mapping]:
    """{reference name: candidate name} for every reference tensor that has a place in `cand`."""
    rt, ct = _tensors(ref), _tensors(cand)
    pairs: dict[str, str] = {}
    for name, t in rt.items():
        if name in ct and ct[name].shape == t.shape:
            pairs[name] = name
    free = {n: t for n, t in ct.items() if n not in pairs.values()}
    for by_leaf in (True, False):   # the same last name component (ln.weight ~ weight), then any name
        for name, t in rt.items():
            if name in pairs:
                continue
            leaf = name.rsplit(".", 1)[-1]
            same = [n for n, c in free.items() if c.shape == t.shape and (not by_leaf or n.rsplit(".", 1)[-1] == leaf)]
            if len(same) == 1:
                pairs[name] = same[0]
                free.pop(same[0])
    missing = tuple(n for n in rt if n not in pairs)
    return pairs, Mapping(tuple(pairs.items()), missing, tuple(sorted(free)))


@torch.no_grad()
def load_values(module: Any, values: dict[str, torch.Tensor], names: dict[str, str] | None = None) -> None:
    """Copy `values` (by reference name) into `module`'s tensors (named through `names`), in place."""
    own = _tensors(module)
    for rname, v in values.items():
        cname = names.get(rname) if names is not None else rname
        if cname is None or cname not in own:
            continue
        t = own[cname]
        t.copy_(v.to(device=t.device, dtype=t.dtype))


def perturb_pair(ref: Any, cand: Any, seed: int) -> Mapping:
    """Give the reference new values and the candidate the same ones; returns how they were mapped."""
    values = perturbed_values(ref, seed)
    names, mapping = map_tensors(ref, cand)
    load_values(ref, values)
    if cand is not ref:
        load_values(cand, values, names)
    return mapping
