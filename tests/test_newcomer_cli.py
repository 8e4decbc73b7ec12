"""A newcomer's first commands, run as a user runs them: `python -m kernelpro ...` in a child process with
no terminal and COLUMNS=80. Every table must keep identifiers whole at that width, every failure must say
why in one line, and the bench table and the HTML report must give the same figures for one run."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import kernelpro
from kernelpro.toolchain import find_tool, no_gpu_reason

HERE = Path(__file__).parent
STATIC = HERE / "kernels" / "static"
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None or find_tool("cuobjdump") is None,
                                reason="nvcc/cuobjdump not installed")
no_gpu = pytest.mark.skipif(no_gpu_reason() is None, reason="checks the output of a machine without a GPU")

TASK = ('import torch\nM = 64\nMETA = {"dtype": "fp32", "features": {"sm_90a": ["wgmma"], "sm_100a": '
        '["tcgen05_mma"]}}\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n'
        "def get_inputs():\n    return [torch.randn(M)]\ndef get_init_inputs():\n    return []\n")


def kp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(HERE.parent)}
    return subprocess.run([sys.executable, "-m", "kernelpro", *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=cwd, stdin=subprocess.DEVNULL)


def boxed_lines_fit(text: str) -> bool:
    """Every line of a drawn table is at most 80 columns and no cell was cut with an ellipsis."""
    box = [ln for ln in text.splitlines() if ln[:1] in "┏┃┡│└"]
    return all(len(ln) <= 80 for ln in box) and "…" not in text


@pytest.fixture(scope="module")
def hopper_suite(tmp_path_factory) -> tuple[Path, Path]:
    """A one-task suite whose solution uses wgmma: it builds for sm_90a and not for sm_100a."""
    root = tmp_path_factory.mktemp("suite")
    (root / "tasks").mkdir()
    (root / "tasks" / "hopper_only.py").write_text(TASK)
    (root / "tasks" / "no_solution.py").write_text(TASK)
    (root / "sol").mkdir()
    shutil.copy(STATIC / "wgmma.cu", root / "sol" / "hopper_only.cu")
    return root / "tasks", root / "sol"


@needs_nvcc
@no_gpu
def test_bench_then_report_tell_the_same_story(hopper_suite, tmp_path):
    tasks, sol = hopper_suite
    db = tmp_path / "store" / "runs.db"
    out = kp("bench", str(tasks), "--solutions", str(sol), "--db", str(db))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    lines = text.splitlines()
    # the first line, before any work: the run and where it is stored; N counts tasks with a candidate
    assert lines[0].startswith(f"kernelpro bench: run 1 in {db.resolve()}: 1 task of tasks with a candidate "
                               "(1 without one: skipped)")
    assert "(ptxbench" not in text and "none)" not in text and "no GPU: static checks only" in text
    # a progress line per task without a terminal, and the compile failure per target with its cause
    assert "verified hopper_only: sm_90a ok; sm_100a fails: Hopper-only (wgmma)" in text
    flat = " ".join(text.split())
    assert "does not compile for sm_100a: wgmma is Hopper-only (sm_90a); sm_100a uses tcgen05.mma" in flat
    assert "compiled sm_90a 1/1, sm_100a 0/1" in flat and "features sm_90a 1/1, sm_100a 0/1" in flat
    assert "skipped 1 task with no solution file" in flat and flat.count("no_solution") == 1
    # the solution is CUDA: no hint to run it on the CPU
    assert "--device cpu" not in flat
    assert boxed_lines_fit(text)

    # report: written beside the store, absolute path printed, same figures, nothing pretends to be timed
    rep = kp("report", "1", "--db", str(db), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    page = db.parent / "reports" / "report-1.html"
    assert page.is_file() and not list(tmp_path.glob("report-*.html"))
    assert f"wrote {page.resolve()} " in rep.stdout
    html = page.read_text()
    assert "sm_90a 1/1, sm_100a 0/1" in html                      # the CLI's compiled line
    assert "fails: Hopper-only (wgmma)" in html and ">not run<" in html
    assert "not timed" in html and not re.search(r"<td>0\.00</td>", html)
    assert ">compile_error<" not in html and ">pending<" not in html

    # verify on both targets: the Hopper-only cause first, each diagnostic once
    v100 = kp("verify", str(sol / "hopper_only.cu"), "--arch", "sm_100a", "--db", str(db))
    assert v100.returncode == 1
    first = " ".join(v100.stdout.split("kernel.ptx")[0].split())
    assert "compile FAILED: wgmma is Hopper-only (sm_90a); sm_100a uses tcgen05.mma" in first
    assert "cannot be compiled for architecture" not in v100.stdout
    msgs = re.findall(r"error: (Instruction '[^']+' not supported)", v100.stdout)
    assert msgs and len(msgs) == len(set(msgs))
    assert len(v100.stdout.splitlines()) < 30 and "--verbose shows" in v100.stdout
    v90 = kp("verify", str(sol / "hopper_only.cu"), "--arch", "sm_90a", "--features", "wgmma", "--db", str(db))
    assert v90.returncode == 0 and "PASS" in v90.stdout and "k_wgmma_bf16" in v90.stdout
    assert boxed_lines_fit(v90.stdout)
    # verify runs are recorded but not listed by default
    lst = kp("report", "--list", "--db", str(db))
    assert lst.returncode == 0 and "2 verify runs not listed (--all lists them)" in lst.stdout
    assert "│ verify" not in lst.stdout and "│ bench" in lst.stdout
    assert kp("report", "--list", "--all", "--db", str(db)).stdout.count("│ verify") == 2


def test_bench_refuses_bad_targets_and_folders_before_creating_a_run(hopper_suite, tmp_path):
    tasks, sol = hopper_suite
    db = tmp_path / "runs.db"
    for args, needle in ((["--arch", "sm_12345"], "--arch sm_12345: not a target kernelpro verifies"),
                         (["--solutions", "/nonexistent"], "--solutions /nonexistent: not a folder")):
        out = kp("bench", str(tasks), "--db", str(db), *(["--solutions", str(sol)] if "--solutions" not in args
                                                            else []), *args)
        err = out.stderr.strip()
        assert out.returncode == 1 and len(err.splitlines()) == 1 and needle in err, err
        assert out.stdout == ""
    runs = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] if db.exists() else 0
    assert runs == 0


def test_tasks_at_80_columns_keeps_names_and_says_which_have_a_reference(tmp_path):
    from kernelpro.suites.task import load_suite

    out = kp("tasks", "ptxbench")
    assert out.returncode == 0
    text = out.stdout
    assert "…" not in text and all(len(ln) <= 80 for ln in text.splitlines() if not ln.startswith(" "))
    names = {ln.split()[0] for ln in text.splitlines() if ln and not ln.startswith(" ")}
    assert {t.name for t in load_suite("ptxbench")} <= names       # every name whole, on its own line
    ref_dir = Path(kernelpro.__file__).parent / "suites" / "ptxbench" / "reference"
    n_tasks = len(load_suite("ptxbench"))
    n_refs = sum((ref_dir / f"{t.name}.py").is_file() for t in load_suite("ptxbench"))
    assert f"{n_tasks} tasks, {n_refs} with a reference solution" in text
    block = text.split("\ngemm_bf16\n")[1].split("\n")[0]
    assert "ref yes" in block
    assert "ref yes" not in text.split("\ngemm_fp16\n")[1].split("\n")[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = kp("tasks", str(empty))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "holds no task files" in bad.stderr


def test_doctor_keeps_paths_whole():
    out = kp("doctor")
    assert out.returncode == 0 and "…" not in out.stdout
    nvcc = find_tool("nvcc")
    if nvcc is not None:
        assert str(nvcc) in out.stdout


@needs_nvcc
def test_verify_demangles_kernel_names(tmp_path):
    cu = tmp_path / "tmpl.cu"
    cu.write_text("template <int N> __global__ void scale_k(float* x) { x[threadIdx.x] *= N; }\n"
                  "template __global__ void scale_k<4>(float*);\n")
    out = kp("verify", str(cu), "--arch", "sm_90a", "--db", str(tmp_path / "r.db"))
    assert out.returncode == 0, out.stderr
    assert "scale_k<4>" in out.stdout and "_Z" not in out.stdout and "…" not in out.stdout


def test_a_syntax_error_is_reported_as_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass ModelNew(torch.nn.Module)\n    pass\n")
    out = kp("verify", str(bad), "--arch", "sm_90a", "--db", str(tmp_path / "r.db"))
    err = out.stderr.strip()
    assert out.returncode == 1 and len(err.splitlines()) == 1
    assert "bad.py:2: SyntaxError" in err and "load_inline" not in err


def _actions(parser: argparse.ArgumentParser, path: str):
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            yield path, a
            for name, sub in a.choices.items():
                yield from _actions(sub, f"{path} {name}")
        else:
            yield path, a


def test_every_flag_of_every_command_has_help():
    from kernelpro.cli import build_parser

    parser, _ = build_parser()
    missing = [f"{path}: {'/'.join(a.option_strings) or a.dest}" for path, a in _actions(parser, "kernelpro")
               if not (a.help or "").strip()]
    assert missing == []
    opt = kp("optimize", "--help")
    flat = " ".join(opt.stdout.split())
    for flag in ("--search", "--objective", "--seed", "--turns", "--temperature"):
        assert re.search(re.escape(flag) + r"[^-]*?\S+ \S+", flat)


@needs_nvcc
@no_gpu
def test_optimize_param_without_gpu_says_what_it_checks_and_names_no_best(tmp_path):
    out = kp("optimize", "ptxbench/gemm_bf16", "--policy", "param", "--budget-nodes", "1", "--quiet",
             "--db", str(tmp_path / "r.db"), "--workdir", str(tmp_path / "w"))
    flat = " ".join(out.stdout.split())
    assert out.returncode == 0, out.stderr
    head = flat.split("static checks only")[0]   # said before the search starts
    assert "no GPU" in head and "nothing can be timed" in head and "compiled for sm_90a" in head
    assert "static checks only" in flat and "none is named best" in flat
    assert not re.search(r"│\s*best\s*│", out.stdout)
