"""A real trajectory for Fixit without a GPU: PTXBench's multi-turn protocol (`kernelpro optimize --protocol`)
against the loopback OpenAI-compatible test server, judged by the real harness on the CPU (pure-PyTorch
candidates: isolated workers, correctness, anti-gaming checks), on two small tasks; then `kernelpro fixit export`. The model's replies are scripted (no
model weights reach this machine); everything after the HTTP reply is the real pipeline.

    python3 docs/measurements/recipes/fixit_demo.py OUTDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))

from loopback_llm import LoopbackLLM  # noqa: E402

from kernelpro.cli import main  # noqa: E402

TASK = '''
import torch
import torch.nn as nn
N = 4096
META = {"name": "NAME", "dtype": "fp32", "description": "y = softmax(x) * FACTOR over the last dimension"}
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1) * FACTOR
def get_inputs():
    return [torch.randn(64, N)]
def get_init_inputs():
    return []
'''

CAND = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        BODY\n"
WRONG = "e = torch.exp(x)\n        return e / e.sum(-1, keepdim=True) * FACTOR + 1e-3"          # off by 1e-3: wrong_output
CRASH = "return torch.softmax(x, dim=-1) * FACTOR @ x"                                      # shape error: crash
FIXED = "e = torch.exp(x - x.amax(-1, keepdim=True))\n        return e / e.sum(-1, keepdim=True) * FACTOR"


def reply(explanation: str, body: str, factor: str) -> tuple:
    return ("reply", f"{explanation}\n```python\n{CAND.replace('BODY', body).replace('FACTOR', factor)}```")


def script(factor: str) -> list[tuple]:
    return [
        reply("Change: softmax written out.", WRONG, factor),
        reply("Explanation: the output carried a stray +1e-3 offset, so every element was off by that much; "
              "removed it and subtracted the row max before exp so large inputs cannot overflow.", FIXED, factor),
        reply("Change: fold the scale into a matrix product.", CRASH, factor),
        reply("Explanation: `@ x` multiplied a (64, N) by a (64, N) matrix, a shape error; the scale is a "
              "scalar, so it is applied elementwise again.", FIXED, factor),
    ]


def run(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    db = out / "runs.db"
    for name, factor in (("softmax2", "2.0"), ("softmax3", "3.0")):
        task = out / f"{name}.py"
        task.write_text(TASK.replace("NAME", name).replace("FACTOR", factor))
        with LoopbackLLM(script(factor)) as srv:
            rc = main(["optimize", str(task), "--db", str(db), "--base-url", srv.base_url, "--model", "loop",
                       "--protocol", "ptxbench", "--turns", "4", "--target-speedup", "100", "--variants", "base",
                       "--repeats", "1", "--evaluator", "harness", "--device", "cpu", "--sizes", "default",
                       "--no-codesearch", "--quiet"])
        print(f"protocol {name}: rc={rc}")
    return main(["fixit", "export", "--db", str(db), "-o", str(out / "fixit"), "--holdout-tasks", "softmax3"])


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1] if len(sys.argv) > 1 else "fixit_demo")))
