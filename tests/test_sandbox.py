"""kernelpro.sandbox: the one launcher of candidate code, and the rule that nothing else starts processes."""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

from kernelpro import isolation, sandbox

PKG = Path(__file__).resolve().parents[1] / "kernelpro"

# Call sites allowed to start a process without the sandbox: each runs only a trusted tool on files the
# harness wrote, never candidate Python, and the reason is kept beside it.
TRUSTED_LAUNCHES = {
    "sandbox.py": "the launcher itself",
    "isolation.py": "probes `true` under each isolation tool",
    "static/compile.py": "nvcc/ptxas on source text (no candidate code runs)",
    "static/sass.py": "cuobjdump/nvdisasm on a cubin",
    "toolchain.py": "`TOOL --version`, and c++filt on kernel names",
    "profile/collect.py": "ncu --query/--import and the report reader on a finished report",
    "suites/tvmffi.py": "nvcc on a TVM-FFI solution's source text and `ldconfig -p`, from inside the candidate's "
                        "own (already sandboxed) build or worker process; no candidate code runs in them",
}
SPAWNERS = {("subprocess", n) for n in ("run", "Popen", "call", "check_call", "check_output", "getoutput",
                                         "getstatusoutput")}
SPAWNERS |= {("os", n) for n in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
                                 "execve", "execvp", "execvpe", "execl", "execlp", "spawnv", "spawnve")}


def _spawn_calls(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in SPAWNERS:
            hits.append((node.lineno, f"{node.func.value.id}.{node.func.attr}"))
        if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "os"):
            for a in node.names:
                if (node.module, a.name) in SPAWNERS:
                    hits.append((node.lineno, f"from {node.module} import {a.name}"))
    return hits


def test_no_process_is_started_outside_the_sandbox():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in TRUSTED_LAUNCHES or "/ptxbench/" in rel:
            continue
        offenders += [f"{rel}:{line} {what}" for line, what in _spawn_calls(path)]
    assert not offenders, ("processes started outside kernelpro.sandbox (route them through sandbox.run, or "
                           "add a trusted-tool reason to TRUSTED_LAUNCHES): " + ", ".join(offenders))


def test_the_scan_sees_a_new_spawn(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import subprocess, os\nsubprocess.run(['x'])\nos.system('y')\nfrom subprocess import Popen\n")
    assert sorted(w for _, w in _spawn_calls(f)) == ["from subprocess import Popen", "os.system", "subprocess.run"]


def test_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess,sys,time;p=subprocess.Popen([sys.executable,'-c','import time;time.sleep(60)']);"
            f"open({str(pidfile)!r},'w').write(str(p.pid));time.sleep(60)")
    t0 = time.monotonic()
    fin = sandbox.run([sys.executable, "-c", code], timeout_s=3, writable=[tmp_path])
    assert fin.timed_out and time.monotonic() - t0 < 20
    child = int(pidfile.read_text())
    time.sleep(0.2)
    status = Path(f"/proc/{child}/status")
    # the grandchild died with the group: gone, or a zombie waiting for init to reap it
    assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_memory_cap_applies(tmp_path):
    fin = sandbox.run([sys.executable, "-c", "import time;time.sleep(0.5);x=bytearray(3*2**30)"], timeout_s=60,
                      mem_bytes=1 << 30)
    assert fin.rc != 0 and "MemoryError" in fin.stderr


def test_gpu_pinning_hides_devices():
    fin = sandbox.run([sys.executable, "-c", "import os;print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"],
                      timeout_s=30, gpu=sandbox.NO_GPU)
    assert fin.stdout.strip() == "''"


def test_isolation_is_recorded_and_blocks_network():
    mode, _ = isolation.selected()
    # 192.0.2.1 is TEST-NET-1: never routed; in a fresh network namespace there is no route at all.
    fin = sandbox.run([sys.executable, "-c", "import socket;socket.create_connection(('192.0.2.1', 9), 2)"],
                      timeout_s=30)
    assert fin.isolation["mode"] == mode
    if mode == "none":
        pytest.skip("no namespace tool works on this machine (isolation mode none)")
    assert "Network is unreachable" in fin.stderr, fin.stderr[-300:]


def test_bwrap_mode_leaves_only_named_folders_writable(tmp_path):
    if not isolation.available()["bwrap"]:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    ok, other = tmp_path / "ok", tmp_path / "other"
    ok.mkdir()
    other.mkdir()
    code = "import sys;open(sys.argv[1]+'/f','w');open(sys.argv[2]+'/f','w')"
    fin = sandbox.run([sys.executable, "-c", code, str(ok), str(other)], timeout_s=30, writable=[ok])
    assert (ok / "f").exists() and not (other / "f").exists() and fin.rc != 0


def test_unknown_isolation_mode_is_one_line_error(monkeypatch):
    from kernelpro.errors import KernelProError

    monkeypatch.setenv("KERNELPRO_ISOLATION", "jail")
    with pytest.raises(KernelProError, match="KERNELPRO_ISOLATION='jail' is not one of"):
        isolation.selected()


def test_doctor_names_the_isolation_mode():
    from kernelpro import isolation
    from kernelpro.toolchain import isolation_row

    name, status, detail = isolation_row()
    mode, _ = isolation.selected()
    assert name == "isolation" and detail.startswith(mode)
    assert status == ("ok" if mode == "bwrap" else "weak")
