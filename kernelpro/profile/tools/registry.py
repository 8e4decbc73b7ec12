"""The tool registry: a tool is one module in this folder that decorates one function with @tool.

A tool function takes a `Context` (one kernel launch and what is known around it) and returns a list of
`Finding`s (empty: nothing to report). Adding a tool is adding a file; `load_all()` imports the folder.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelpro.profile.advice import Finding
from kernelpro.profile.collect import KernelProfile
from kernelpro.profile.roofline import Ceilings, Roofline

TOOLS: dict[str, Callable[[Context], list[Finding]]] = {}


@dataclass
class Context:
    profile: KernelProfile
    roofline: Roofline
    ceilings: Ceilings
    arch: str = "sm_90a"
    dtype: str | None = None                       # the task's dtype, when a task is known
    requested: tuple[str, ...] = ()                # features the task asks for on `arch`
    system: Any = None                             # system.SystemView, when the PyTorch-profiler pass ran
    resources: dict[str, Any] = field(default_factory=dict)   # ptxas / static verifier resource report
    executed: dict[str, float] = field(default_factory=dict)  # SASS opcode counts over every profiled launch
    dominant: bool = True                          # among the launches that hold most of the GPU time


def tool(name: str) -> Callable[[Callable[[Context], list[Finding]]], Callable[[Context], list[Finding]]]:
    def register(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        TOOLS[name] = fn
        fn.tool_name = name  # type: ignore[attr-defined]
        return fn
    return register


def load_all() -> dict[str, Callable[[Context], list[Finding]]]:
    from kernelpro.profile import tools as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name != "registry":
            importlib.import_module(f"{pkg.__name__}.{m.name}")
    return TOOLS
