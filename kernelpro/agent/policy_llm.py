"""The LLM policy: one expansion = one chat completion that rewrites (or repairs) the parent kernel.

The model may first ask the code-search tool (<search>...</search>, up to `max_searches` rounds);
every unusable reply (endpoint down, malformed, truncated, no code) becomes a failed Proposal with
its reason, never an exception.
"""

from __future__ import annotations

import re
from typing import Any

from kernelpro.agent.llm import LLMClient
from kernelpro.agent.mcts import ExpandContext, Proposal
from kernelpro.agent.prompts import PromptContext, build_messages, extract_code
from kernelpro.suites.task import Task

ENDPOINT_REASONS = ("endpoint unreachable", "server error", "rate limited")
_CHANGE = re.compile(r"^\s*\**change\**\s*:\s*(.+)$", re.I | re.M)


class LLMPolicy:
    name = "llm"
    repairs = True

    def __init__(self, client: LLMClient, task: Task, arch: str, hw_context: str = "", feedback: str = "advice",
                 index: Any = None, max_searches: int = 2):
        self.client, self.task, self.arch = client, task, arch
        self.hw_context, self.feedback = hw_context, feedback
        self.index, self.max_searches = index, max_searches if index is not None else 0
        self.task_source = task.path.read_text()

    def root(self, task: Task) -> Proposal:
        # The reference is the baseline (1.0x by definition); it is stored, never evaluated.
        return Proposal(self.task_source, what="reference Model (baseline)", origin="reference")

    def context(self, ctx: ExpandContext) -> PromptContext:
        p = ctx.parent
        o = p.outcome
        pc = PromptContext(task=self.task, arch=self.arch, task_source=self.task_source, hw_context=self.hw_context,
                           memory=ctx.memory.render(), allow_search=self.max_searches)
        if p.origin == "reference":
            return pc
        pc.best_source, pc.best_summary = p.source, (o.summary() if o else "")
        if o is not None and not o.ok:
            pc.errors = "\n".join(x for x in (o.reason, o.compile_errors, o.verify_errors) if x)
            pc.instruction = ("The kernel above failed (see the errors). Fix it, keeping what works. Start with "
                              "one line `Change: <what you changed>`, then the complete file in one ```python block.")
        else:
            if o is not None and self.feedback != "none":
                pc.diagnoses = o.diagnoses
            pc.instruction = ("Make this kernel faster while keeping it correct. Start with one line "
                              "`Change: <what you changed>`, then the complete file in one ```python block.")
        if o is not None:
            pc.missing_features = list(o.missing_features)
        return pc

    def propose(self, ctx: ExpandContext) -> Proposal:
        messages = build_messages(self.context(ctx))
        info: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "searches": []}
        for round_ in range(self.max_searches + 1):
            reply = self.client.chat(messages)
            info["prompt_tokens"] += reply.prompt_tokens
            info["completion_tokens"] += reply.completion_tokens
            if not reply.ok:
                return Proposal(None, what="llm expansion", origin="llm", info=info, reason=reply.reason,
                                endpoint_error=reply.reason.startswith(ENDPOINT_REASONS))
            ex = extract_code(reply.text, truncated=reply.truncated)
            if ex.code:
                m = _CHANGE.search(reply.text)
                what = m.group(1).strip()[:160] if m else "LLM rewrite"
                info["finish_reason"] = reply.finish_reason
                info["reply"] = reply.text  # the model's own words: Fixit's explanation of a fix
                return Proposal(ex.code, what=what, origin="llm", info=info)
            if ex.searches and self.index is not None and round_ < self.max_searches:
                from kernelpro.agent.codesearch import format_snippets

                results = "\n".join(format_snippets(q, self.index.search(q, 4), 4000) for q in ex.searches[:3])
                info["searches"] += ex.searches[:3]
                messages = messages + [{"role": "assistant", "content": reply.text},
                                       {"role": "user", "content": results + "\n\nNow write the kernel."}]
                continue
            return Proposal(None, what="llm expansion", origin="llm", info=info, reason=ex.reason)
        return Proposal(None, what="llm expansion", origin="llm", info=info, reason="search rounds exhausted without code")
