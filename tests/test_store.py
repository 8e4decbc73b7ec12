"""The run store: schema, transactions, resume bookkeeping, and survival of kill -9."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from kernelpro.errors import KernelProError
from kernelpro.results.store import SCHEMA_VERSION, Store


def test_schema_version_and_roundtrip(tmp_path):
    s = Store(tmp_path / "r.db")
    assert s.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    run = s.new_run("bench", "ptxbench", {"solutions": "reference"})
    c1 = s.add_candidate(run, "ptxbench/gemm_bf16", "src A", origin="reference")
    assert s.add_candidate(run, "ptxbench/gemm_bf16", "src A") == c1, "same source in the same run dedupes"
    c2 = s.add_candidate(run, "ptxbench/gemm_bf16", "src B", parent_id=c1, info={"explanation": "x"})
    s.record("evaluations", c1, True, {"speedup": 1.5}, arch="sm_90a")
    assert s.latest("evaluations", c1)["payload"] == {"speedup": 1.5}
    assert s.candidate(c2)["parent_id"] == c1 and s.candidate(c2)["info"] == {"explanation": "x"}
    assert s.finished_tasks(run) == set(), "c2 has no evaluation yet"
    s.record("evaluations", c2, False, {"reason": "wrong_output"})
    assert s.finished_tasks(run) == {"ptxbench/gemm_bf16"}
    s.set_run_status(run, "done")
    assert s.get_run(run)["status"] == "done" and s.get_run(run)["config"] == {"solutions": "reference"}


def test_search_nodes_upsert(tmp_path):
    s = Store(tmp_path / "r.db")
    run = s.new_run("optimize", "ptxbench", {})
    s.put_node(run, "root", None, None, 0, 1, 0.0, "open", {})
    s.put_node(run, "root", None, None, 0, 5, 2.5, "expanded", {"best": 1.2})
    (node,) = s.nodes(run)
    assert (node["visits"], node["value"], node["status"], node["payload"]) == (5, 2.5, "expanded", {"best": 1.2})


def test_failed_write_rolls_back(tmp_path):
    s = Store(tmp_path / "r.db")
    run = s.new_run("bench", None, {})
    with pytest.raises(RuntimeError), s.tx() as db:
        db.execute("INSERT INTO runs (kind, config, status, created) VALUES ('x', '{}', 'running', 0)")
        raise RuntimeError("boom")
    assert [r["id"] for r in s.runs()] == [run]


def test_unknown_run_and_bad_file_are_one_line_errors(tmp_path):
    s = Store(tmp_path / "r.db")
    with pytest.raises(KernelProError, match="no run 42"):
        s.get_run(42)
    bad = tmp_path / "notadb.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(KernelProError, match="not a KernelPro run store"):
        Store(bad)


def test_newer_schema_is_refused(tmp_path):
    Store(tmp_path / "r.db").close()
    db = sqlite3.connect(tmp_path / "r.db")
    db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(KernelProError, match="newer than this kernelpro"):
        Store(tmp_path / "r.db")


WRITER = textwrap.dedent("""
    import sys, time
    from kernelpro.results.store import Store
    s = Store(sys.argv[1])
    run = s.new_run("bench", "t", {})
    i = 0
    while True:
        c = s.add_candidate(run, "t/x", f"source {i}")
        s.record("evaluations", c, True, {"i": i, "pad": "x" * 2000})
        print(i, flush=True)
        i += 1
""")


def test_store_survives_kill_9_mid_write(tmp_path):
    db = tmp_path / "r.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    last = -1
    deadline = time.time() + 30
    while last < 40 and time.time() < deadline:  # let it commit a few dozen candidates
        last = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert last >= 40
    s = Store(db)
    assert s.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    (run,) = s.runs()
    cands = s.candidates(run["id"])
    # Everything the writer reported as written is there; at most the one in flight is missing its result.
    assert len(cands) >= last + 1
    evaluated = [c for c in cands if s.latest("evaluations", c["id"])]
    assert len(evaluated) >= last + 1 and len(cands) - len(evaluated) <= 1
    assert [s.latest("evaluations", c["id"])["payload"]["i"] for c in evaluated] == list(range(len(evaluated)))
