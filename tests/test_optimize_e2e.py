"""End to end: `kernelpro optimize` with the LLM policy against the loopback OpenAI-compatible server,
judged by the real static evaluator (nvcc compile + PTX/SASS feature verification, no GPU).

The server answers with: a malformed body (twice, so the retry also fails), a correct candidate using
mbarrier, a candidate that does not compile, a truncated reply, and then dies. The search must record
each as a node with its verdict, stop after repeated endpoint failures, mark the run interrupted, and
resume from the store.
"""

import pytest

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelpro[llm]')")

from loopback_llm import LoopbackLLM  # noqa: E402

from kernelpro.cli import main  # noqa: E402
from kernelpro.results.store import Store  # noqa: E402
from kernelpro.toolchain import find_tool  # noqa: E402

TASK = '''
import torch
import torch.nn as nn
N = 1024
META = {"name": "double", "dtype": "fp32", "description": "y = 2 * x", "features": {"sm_90a": ["mbarrier"]}}
class Model(nn.Module):
    def forward(self, x):
        return 2 * x
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
'''

CAND = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cstdint>
__global__ void scale2(const float* x, float* y, int n) {
    __shared__ uint64_t bar;
    if (threadIdx.x == 0) {
        unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(a));
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = BODY;
}
"""
ext = load_inline(name="kp_e2e_NAME", cpp_sources="", cuda_sources=CUDA, functions=[], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale2(x)
'''
GOOD = CAND.replace("BODY", "2.0f * x[i]").replace("NAME", "good")
BAD = CAND.replace("BODY", "undefined_symbol_q * x[i]").replace("NAME", "bad")
NO_CUDA = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return 2 * x\n"

needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="needs nvcc for the real compile path")


@needs_nvcc
def test_llm_search_end_to_end_with_dying_endpoint_and_resume(tmp_path, capsys):
    task = tmp_path / "double.py"
    task.write_text(TASK)
    db = tmp_path / "runs.db"
    script = [("garbage",), ("garbage",),
              ("reply", f"Change: mbarrier-guarded scale kernel\n```python\n{GOOD}```"),
              ("reply", f"Change: broken variant\n```python\n{BAD}```"),
              ("reply", "Change: big rewrite\n```python\nimport torch\nclass ModelNew(torch.nn.Mod", "length"),
              ("die",)]
    with LoopbackLLM(script) as srv:
        cfg = tmp_path / "kp.toml"
        cfg.write_text(f'[llm]\nbase_url = "{srv.base_url}"\nmodel = "loop"\nmax_retries = 1\nbackoff_s = 0.01\n'
                       'timeout_s = 30\n')
        argv = ["optimize", str(task), "--db", str(db), "--config", str(cfg), "--evaluator", "static",
                "--arch", "sm_90a", "--no-codesearch", "--no-hw-docs", "--budget-nodes", "20", "--quiet",
                "--workdir", str(tmp_path / "work")]
        rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    st = Store(db)
    run = st.runs("optimize")[-1]
    assert run["status"] == "interrupted"
    nodes = {r["node_key"]: r for r in st.nodes(run["id"])}
    verdicts = [(r["status"], r["payload"]["outcome"]["stage"], r["payload"]["outcome"]["reason"])
                for r in nodes.values()]
    stages = [v[1] for v in verdicts]
    assert nodes["n0"]["payload"]["origin"] == "reference"
    assert any(s == "generate" and "malformed reply" in r for _, s, r in verdicts)
    assert any(s == "generate" and "truncated" in r for _, s, r in verdicts)
    assert stages.count("ok") == 1 and stages[0] == "reference"
    compile_fail = [r for _, s, r in verdicts if s == "compile"]
    assert len(compile_fail) == 1 and "undefined_symbol_q" in compile_fail[0]
    assert sum("endpoint unreachable" in r for _, _, r in verdicts) == 3
    good = next(r for r in nodes.values() if r["payload"]["what"] == "mbarrier-guarded scale kernel")
    assert good["status"] in ("open", "expanded")
    cand = st.candidate(good["candidate_id"])
    assert cand["source"] == GOOD and cand["origin"] == "llm"
    ev = st.latest("evaluations", good["candidate_id"])
    assert ev["ok"] and ev["payload"]["record"]["features"] == {"mbarrier": "emitted"}
    # the broken candidate's compile errors went into the next prompt (repair) or at least the store
    bad = next(r for r in nodes.values() if r["payload"]["outcome"]["stage"] == "compile")
    assert "undefined_symbol_q" in bad["payload"]["outcome"]["compile_errors"]
    n_before = len(nodes)

    # resume against a new endpoint: the tree is rebuilt and the search continues
    with LoopbackLLM([("fn", lambda body: f"Change: plain torch\n```python\n{NO_CUDA}```")]) as srv2:
        cfg.write_text(f'[llm]\nbase_url = "{srv2.base_url}"\nmodel = "loop"\nmax_retries = 0\n')
        rc = main(["optimize", "--db", str(db), "--config", str(cfg), "--resume", str(run["id"]),
                   "--budget-nodes", str(n_before + 1), "--quiet", "--no-codesearch",
                   "--workdir", str(tmp_path / "work")])
        prompts = [m["content"] for req in srv2.requests for m in req["messages"] if m["role"] == "user"]
    assert rc == 0
    nodes2 = st.nodes(run["id"])
    assert len(nodes2) == n_before + 1
    new = nodes2[-1]
    assert new["payload"]["what"] == "plain torch" and new["payload"]["outcome"]["stage"] == "compile"
    assert "loads no CUDA code" in new["payload"]["outcome"]["reason"]
    # the rebuilt search memory reached the model
    assert any("Search memory" in p and "mbarrier-guarded scale kernel" in p for p in prompts)
    assert st.get_run(run["id"])["status"] == "done"
    st.close()


def test_param_policy_needs_a_template(tmp_path, capsys):
    task = tmp_path / "double.py"
    task.write_text(TASK)
    rc = main(["optimize", str(task), "--db", str(tmp_path / "r.db"), "--policy", "param", "--evaluator", "static",
               "--arch", "sm_90a", "--quiet"])
    assert rc == 1
    assert "no parameterized template" in capsys.readouterr().err


def test_llm_policy_without_endpoint_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    for v in ("KERNELPRO_BASE_URL", "KERNELPRO_MODEL", "KERNELPRO_CONFIG"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    task = tmp_path / "double.py"
    task.write_text(TASK)
    rc = main(["optimize", str(task), "--db", str(tmp_path / "r.db"), "--evaluator", "static", "--arch", "sm_90a",
               "--quiet", "--no-codesearch"])
    err = capsys.readouterr().err
    assert rc == 1 and "needs an endpoint" in err and len(err.strip().splitlines()) == 1
