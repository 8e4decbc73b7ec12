"""Prompt building for kernel-writing expansions, and robust code extraction from model replies.

A reply may hold zero, one or several fenced blocks, may have lost its closing fence to a token limit,
or may be bare code. `extract_code` picks the block that is a candidate (defines ModelNew and parses),
and otherwise says precisely why nothing usable came back; that reason becomes the failed node's verdict.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from kernelpro.suites.task import Task

SYSTEM = (
    "You are an expert GPU kernel engineer writing architecture-specific CUDA/PTX for NVIDIA {arch}. "
    "You answer with one complete Python file in a single ```python fenced block. The file defines "
    "`class ModelNew(torch.nn.Module)` with the same constructor and forward signature as the reference "
    "`Model`, and implements the computation in your own CUDA kernels (for example through "
    "torch.utils.cpp_extension.load_inline with inline PTX where needed). Calling library kernels that "
    "compute the result (cuBLAS, cuDNN, torch matmul/attention ops) is forbidden and detected."
)

SEARCH_HELP = (
    "You may look up CUTLASS/CuTe source before writing code: reply with only "
    "<search>your query</search> (e.g. <search>SM90 TMA load atom</search>); the matching header "
    "snippets come back in the next message. At most {n} searches per answer."
)


@dataclass
class PromptContext:
    task: Task
    arch: str
    task_source: str
    hw_context: str = ""                  # prompting.hardware_context(...) text, or ''
    best_source: str | None = None        # the kernel to improve (None: write from scratch)
    best_summary: str = ""                # e.g. 'ok 1.13x'
    diagnoses: str = ""                   # profiling advice for best_source
    errors: str = ""                      # compile / verification / correctness errors of the parent
    missing_features: list[str] = field(default_factory=list)
    memory: str = ""                      # search memory (what was tried, worked, failed)
    search_results: str = ""              # code-search snippets the model asked for
    allow_search: int = 0                 # searches allowed (0: do not offer the tool)
    instruction: str = ""                 # extra direction for this expansion


def missing_feature_warning(arch: str, missing: list[str]) -> str:
    if not missing:
        return ""
    return (f"WARNING: the task requires these {arch} features, and your kernel does not use them "
            f"(checked in PTX/SASS): {', '.join(missing)}. A kernel without them does not count as a "
            "solution even if it is correct and fast.")


def _cap(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...[cut]...\n" + text[-limit // 2:]


def build_messages(ctx: PromptContext) -> list[dict[str, str]]:
    """System + one user message, sections in a fixed order so replies are comparable across nodes."""
    t = ctx.task
    requested = t.requested_features(ctx.arch)
    parts = [f"## Task: {t.key}\n{t.description}".rstrip()]
    if requested:
        parts.append(f"Required {ctx.arch} features (verified in PTX, SASS and executed instructions): "
                     + ", ".join(requested))
    parts.append(f"Reference implementation (`Model`, problem sizes are the module globals):\n"
                 f"```python\n{ctx.task_source.strip()}\n```")
    if ctx.hw_context.strip():
        parts.append("## Hardware notes\n" + _cap(ctx.hw_context, 24000))
    if ctx.best_source:
        parts.append(f"## Current kernel to improve ({ctx.best_summary or 'unevaluated'})\n"
                     f"```python\n{ctx.best_source.strip()}\n```")
    if ctx.diagnoses.strip():
        parts.append("## Profiling diagnosis of the current kernel\n" + _cap(ctx.diagnoses, 6000))
    if ctx.errors.strip():
        parts.append("## Errors from the last attempt\n" + _cap(ctx.errors, 6000))
    warn = missing_feature_warning(ctx.arch, ctx.missing_features)
    if warn:
        parts.append(warn)
    if ctx.memory.strip():
        parts.append("## Search memory (earlier attempts)\n" + ctx.memory.strip())
    if ctx.search_results.strip():
        parts.append("## Code search results\n" + ctx.search_results.strip())
    if ctx.allow_search:
        parts.append(SEARCH_HELP.format(n=ctx.allow_search))
    parts.append(ctx.instruction.strip() or
                 ("Write a faster, correct ModelNew. " if ctx.best_source else "Write a correct, fast ModelNew. ")
                 + "Reply with the complete file in one ```python block.")
    return [{"role": "system", "content": SYSTEM.format(arch=ctx.arch)},
            {"role": "user", "content": "\n\n".join(parts)}]


# --------------------------------------------------------------------------------------------------
# Code extraction
# --------------------------------------------------------------------------------------------------

@dataclass
class Extracted:
    code: str | None
    reason: str = ""          # why code is None
    searches: list[str] = field(default_factory=list)  # <search> requests in the reply


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.M)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.S | re.I)
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_PY_LANGS = {"python", "py", "python3", ""}


def _blocks(text: str) -> tuple[list[tuple[str, str]], str | None]:
    """Closed fenced blocks as (lang, body), plus the body of a final unclosed block (or None)."""
    blocks, open_body = [], None
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        f = fences[i]
        close = next((g for g in fences[i + 1:] if g.group(1)[0] == f.group(1)[0]
                      and len(g.group(1)) >= len(f.group(1)) and not g.group(2)), None)
        if close is None:
            open_body = text[f.end() + 1:]
            break
        blocks.append((f.group(2).lower(), text[f.end() + 1: close.start()]))
        i = fences.index(close) + 1
    return blocks, open_body


def _parses(code: str) -> str | None:
    try:
        ast.parse(code)
        return None
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"


def extract_code(text: str, truncated: bool = False, require: str = "ModelNew") -> Extracted:
    """The candidate file in a reply. Prefers the last python block that defines `require` and parses."""
    searches = [s.strip() for s in _SEARCH.findall(text) if s.strip()]
    text = _THINK.sub("", text)  # reasoning models may put draft code in their thinking
    blocks, open_body = _blocks(text)
    py = [b for lang, b in blocks if lang in _PY_LANGS]
    with_cls = [b for b in py if re.search(rf"\bclass\s+{require}\b", b)]
    for body in reversed(with_cls):
        if _parses(body) is None:
            return Extracted(body.strip() + "\n", searches=searches)
    if with_cls:
        err = _parses(with_cls[-1])
        return Extracted(None, f"the code block defining {require} is not valid Python ({err})", searches)
    if open_body is not None and re.search(rf"\bclass\s+{require}\b", open_body):
        if truncated:
            return Extracted(None, "reply truncated (token limit) inside the code block", searches)
        if _parses(open_body) is None:  # closing fence merely forgotten
            return Extracted(open_body.strip() + "\n", searches=searches)
        return Extracted(None, "unterminated code block that is not valid Python", searches)
    if not blocks and open_body is None and re.search(rf"\bclass\s+{require}\b", text):
        # Bare code without fences: from the first import to the end.
        m = re.search(r"^(import|from)\s+\w", text, re.M)
        if m:
            body = text[m.start():]
            err = _parses(body)
            if err is None:
                return Extracted(body.strip() + "\n", searches=searches)
            if truncated:
                return Extracted(None, "reply truncated (token limit) inside unfenced code", searches)
            return Extracted(None, f"unfenced code is not valid Python ({err})", searches)
    if searches:
        return Extracted(None, "search request only", searches)
    if truncated:
        return Extracted(None, "reply truncated (token limit) before any code", searches)
    if blocks:
        return Extracted(None, f"no code block defines class {require}", searches)
    return Extracted(None, f"no code in the reply (no fenced block, no class {require})", searches)
