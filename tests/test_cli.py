"""The `kernelpro` entry point: help lists every stage, errors are one line, doctor and tasks run."""

import subprocess
import sys

from kernelpro.cli import COMMANDS, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelpro", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_subcommand():
    out = run_cli("--help")
    assert out.returncode == 0
    for name in ("bench", "verify", "profile", "optimize", "fixit", "report", "tasks", "doctor"):
        assert name in COMMANDS and f"    {name}" in out.stdout


def test_doctor_reports_tools_and_gpu():
    out = run_cli("doctor")
    assert out.returncode == 0
    for row in ("nvcc", "ptxas", "cuobjdump", "gpu"):
        assert row in out.stdout


def test_malformed_task_folder_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("import torch\nMETA = {'dtype': 'fp64'}\nclass Model: pass\n"
                                        "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    rc = main(["tasks", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and "broken.py" in err and "fp64" in err


def test_tasks_lists_a_folder(tmp_path, capsys):
    (tmp_path / "vadd.py").write_text(
        "import torch\nN = 1024\nMETA = {'dtype': 'fp32', 'flops': 'N', 'bytes': '12*N'}\n"
        "class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
        "def get_inputs(): return [torch.randn(N), torch.randn(N)]\ndef get_init_inputs(): return []\n")
    assert main(["tasks", str(tmp_path)]) == 0
    assert "vadd" in capsys.readouterr().out
