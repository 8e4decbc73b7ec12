"""Shared builds: a worker cannot poison the build folder others load; the store marks a dead run
interrupted; a v1 store migrates to v2 in place."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelpro import isolation
from kernelpro.harness.build import MARKER, Build, cached_build
from kernelpro.harness.job import Job
from kernelpro.harness.worker import extension_dir, run_job
from kernelpro.results.store import SCHEMA_VERSION, Store
from kernelpro.suites.candidate import load_candidate

TASK = Path(__file__).parent / "tasks" / "vector_add.py"


def test_worker_writes_land_in_its_private_copy_not_the_shared_build(tmp_path):
    if not isolation.can_bind():
        pytest.skip("needs bubblewrap (the bind that shows a private copy at the shared path)")
    cand = tmp_path / "cand.py"
    cand.write_text(textwrap.dedent("""
        import os, pathlib
        import torch.nn as nn
        d = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"])
        (d / "poison.txt").write_text("x")          # what a hostile candidate would do to the cache
        (d / "kept.txt").write_text((d / "kept.txt").read_text() + "!")
        class ModelNew(nn.Module):
            def forward(self, a, b):
                return a + b
    """))
    c = load_candidate(cand)
    shared = extension_dir(c.hash, tmp_path / "cache")
    (shared / "kept.txt").write_text("built")
    job = Job(task_path=str(TASK), candidate_path=str(cand), candidate_hash=c.hash, device="cpu",
              baselines=("eager",), trials=1, sizes="shown")
    r = run_job(job, timeout_s=120, cache_dir=tmp_path / "cache")
    assert r.ok, (r.reason, r.detail)
    assert r.build and r.build["view"] == "private copy" and r.build["ext_dir"] == str(shared)
    assert not (shared / "poison.txt").exists() and (shared / "kept.txt").read_text() == "built"


def test_cached_build_needs_a_marker_from_a_good_build(tmp_path):
    h = "ab" * 32
    d = extension_dir(h, tmp_path)
    assert cached_build(h, tmp_path) is None
    (d / MARKER).write_text('{"hash": "x", "unknown": 1}')
    assert cached_build(h, tmp_path) is None          # not a Build record: build again
    (d / MARKER).write_text(__import__("json").dumps(Build(h, str(d), True, False, 3.0).to_dict()))
    hit = cached_build(h, tmp_path)
    assert hit is not None and hit.cached and hit.ok


def test_a_killed_run_reads_interrupted(tmp_path):
    db = tmp_path / "r.db"
    code = (f"import os; from kernelpro.results.store import Store; s = Store({str(db)!r}); "
            "s.new_run('bench', 't', {}); os._exit(0)")     # dies without setting a status
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    st = Store(db)
    assert st.runs()[-1]["status"] == "interrupted"
    alive = st.new_run("bench", "t", {})
    assert st.get_run(alive)["status"] == "running"   # this process still lives


def test_v1_store_migrates(tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:
        c.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('schema_version', '1');
            CREATE TABLE runs (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, suite TEXT, config TEXT NOT NULL,
                status TEXT NOT NULL, host TEXT, created REAL NOT NULL, finished REAL);
            INSERT INTO runs (kind, suite, config, status, host, created) VALUES ('bench', 's', '{}', 'running',
                'h', 0);
        """)
    st = Store(db)
    run = st.get_run(1)
    assert run["status"] == "running" and run["pid"] is None      # a v1 run: nothing to judge it by
    assert st.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    cid = st.add_candidate(1, "s/t", "x")
    st.record("builds", cid, True, {"hash": "h"})
    assert st.latest("builds", cid)["ok"] == 1
