"""Prompt sections and robust code extraction from model replies; search memory."""

from pathlib import Path

import pytest

from kernelpro.agent.memory import SearchMemory
from kernelpro.agent.prompts import PromptContext, build_messages, extract_code
from kernelpro.suites.task import load_task

GOOD = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
TASK = '''
import torch
import torch.nn as nn
N = 8
META = {"description": "y = 2x", "features": {"sm_90a": ["wgmma", "tma"]}}
class Model(nn.Module):
    def forward(self, x):
        return 2 * x
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
'''


def test_single_fenced_block():
    ex = extract_code(f"Change: nothing\n```python\n{GOOD}```\nDone.")
    assert ex.code == GOOD


def test_prefers_last_valid_block_defining_modelnew():
    draft = GOOD.replace("return x", "return x  # draft")
    helper = "```cuda\n__global__ void k() {}\n```"
    text = f"First try:\n```python\n{draft}```\n{helper}\nFinal:\n```py\n{GOOD}```\n```python\nprint('usage')\n```"
    assert extract_code(text).code == GOOD


def test_skips_invalid_later_block_for_valid_earlier_one():
    broken = GOOD.replace("def forward(self, x):", "def forward(self, x)")
    text = f"```python\n{GOOD}```\nand a variant\n```python\n{broken}```"
    assert extract_code(text).code == GOOD


def test_only_invalid_block_reports_syntax_error():
    broken = GOOD.replace("def forward(self, x):", "def forward(self, x)")
    ex = extract_code(f"```python\n{broken}```")
    assert ex.code is None and "not valid Python" in ex.reason and "line 5" in ex.reason


def test_missing_closing_fence_recovered_when_complete():
    ex = extract_code(f"Here:\n```python\n{GOOD}")
    assert ex.code == GOOD


def test_truncated_reply_inside_block():
    ex = extract_code(f"```python\n{GOOD[:-20]}", truncated=True)
    assert ex.code is None and "truncated" in ex.reason


def test_unfenced_code():
    assert extract_code(f"Sure, here it is.\n\n{GOOD}").code == GOOD
    ex = extract_code(f"Sure.\n{GOOD[:-10]}(", truncated=True)
    assert ex.code is None and "truncated" in ex.reason


def test_thinking_is_ignored_and_no_code_is_explained():
    ex = extract_code(f"<think>```python\n{GOOD}```</think>I cannot do this.")
    assert ex.code is None and "no code" in ex.reason
    assert "no code block defines" in extract_code("```python\nx = 1\n```").reason


def test_search_requests_are_returned():
    ex = extract_code("Let me look: <search>SM90 TMA load atom</search> <search> wgmma descriptor </search>")
    assert ex.code is None and ex.searches == ["SM90 TMA load atom", "wgmma descriptor"]
    assert ex.reason == "search request only"


def test_tilde_fences_and_longer_fences():
    assert extract_code(f"~~~python\n{GOOD}~~~").code == GOOD
    assert extract_code(f"````python\n{GOOD}````").code == GOOD


@pytest.fixture
def task(tmp_path):
    p = tmp_path / "double.py"
    p.write_text(TASK)
    return load_task(p, suite="t")


def test_prompt_has_every_section_in_order(task):
    ctx = PromptContext(task=task, arch="sm_90a", task_source=Path(task.path).read_text(),
                        hw_context="WGMMA NOTES", best_source=GOOD, best_summary="ok 1.10x",
                        diagnoses="latency bound: deepen the pipeline", errors="ptxas error: bad operand",
                        missing_features=["tma"], memory="3 attempts: 1 worked", search_results="// cute/x.hpp",
                        allow_search=2)
    sys_msg, user = build_messages(ctx)
    assert sys_msg["role"] == "system" and "sm_90a" in sys_msg["content"]
    u = user["content"]
    order = ["## Task: t/double", "Required sm_90a features", "wgmma, tma", "class Model(nn.Module)",
             "WGMMA NOTES", "ok 1.10x", "class ModelNew", "latency bound", "ptxas error", "WARNING",
             "3 attempts", "// cute/x.hpp", "<search>"]
    pos = [u.index(s) for s in order]
    assert pos == sorted(pos)
    assert "tma" in u[u.index("WARNING"):u.index("3 attempts")]


def test_prompt_omits_empty_sections(task):
    _, user = build_messages(PromptContext(task=task, arch="sm_90a", task_source="x = 1"))
    u = user["content"]
    for absent in ("Hardware notes", "Current kernel", "Profiling", "Errors", "WARNING", "Search memory", "<search>"):
        assert absent not in u


def test_memory_folds_recurring_failures_and_caps():
    m = SearchMemory(max_chars=600)
    m.add("n1", "n0", "BN 256->128", "ok 1.05x", True, 1.05)
    for i in range(4):
        m.add(f"n{i + 2}", "n1", f"try {i}", f"compile: ptxas error line {100 + i}: too many registers", False)
    m.add("n9", "n1", "STAGES 4->6", "ok 1.20x", True, 1.2)
    text = m.render()
    assert "6 attempts: 2 worked, 4 failed" in text
    assert text.index("[n9]") < text.index("[n1]")  # best first
    assert "(x4)" in text   # the four compile failures folded into one lesson
    for i in range(50):
        m.add(f"m{i}", "n1", "x" * 100, "correctness: wrong output " + "y" * 100, False)
    assert len(m.render()) <= 600
