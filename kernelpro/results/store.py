"""The run store: one SQLite file holding runs, candidates and every verdict about them.

Every write is its own transaction (WAL journal, synchronous=FULL), so `kill -9` at any point loses at
most the candidate in flight; `--resume RUN_ID` picks a run up from what was committed. JSON payloads
keep the schema small while the records evolve; the scalar columns are the ones queries filter on.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelpro import paths
from kernelpro.errors import KernelProError

# v2: runs.pid + runs.heartbeat (a dead run reads as interrupted), the `builds` table (the CPU build stage)
SCHEMA_VERSION = 3
HEARTBEAT_S = 10.0         # a running run refreshes its heartbeat this often
STALE_AFTER_S = 120.0      # a run on another host whose heartbeat is older than this has died

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,            -- bench | verify | profile | optimize | fixit | ablate
    suite TEXT,
    config TEXT NOT NULL,          -- JSON: everything needed to resume
    status TEXT NOT NULL,          -- running | done | failed | interrupted
    host TEXT,
    created REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    task TEXT NOT NULL,            -- suite/name
    kind TEXT NOT NULL,            -- py | cu | ptx
    origin TEXT NOT NULL,          -- reference | user | llm | policy | baseline
    source TEXT NOT NULL,
    hash TEXT NOT NULL,            -- sha256 of source
    parent_id INTEGER REFERENCES candidates(id),
    info TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    UNIQUE (run_id, task, hash)
);
CREATE TABLE IF NOT EXISTS compiles (
    id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    arch TEXT, ok INTEGER NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS verifications (
    id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    arch TEXT, ok INTEGER NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS builds (
    id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    arch TEXT, ok INTEGER NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    arch TEXT, ok INTEGER NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (
    id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    arch TEXT, ok INTEGER NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS search_nodes (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    node_key TEXT NOT NULL,
    parent_key TEXT,
    candidate_id INTEGER REFERENCES candidates(id),
    depth INTEGER NOT NULL DEFAULT 0,
    visits INTEGER NOT NULL DEFAULT 0,
    value REAL NOT NULL DEFAULT 0,
    status TEXT NOT NULL,          -- open | expanded | failed | pruned
    payload TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    UNIQUE (run_id, node_key)
);
CREATE TABLE IF NOT EXISTS ablation_cells (   -- v3: one finished cell of `kernelpro ablate`
    id INTEGER PRIMARY KEY,
    study_run INTEGER NOT NULL REFERENCES runs(id),
    arm TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    optimize_run INTEGER REFERENCES runs(id),
    payload TEXT NOT NULL,         -- JSON: kernelpro.agent.ablate.CellResult
    created REAL NOT NULL,
    UNIQUE (study_run, arm, task, seed)
);
CREATE INDEX IF NOT EXISTS cand_run ON candidates(run_id, task);
CREATE INDEX IF NOT EXISTS eval_cand ON evaluations(candidate_id);
CREATE INDEX IF NOT EXISTS node_run ON search_nodes(run_id);
"""

RESULT_TABLES = ("compiles", "builds", "verifications", "evaluations", "profiles")


def default_db_path() -> Path:
    return paths.db_path()


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class Store:
    """A thin layer over sqlite3; one connection per Store, not shared across processes."""

    def __init__(self, path: str | Path | None = None, readonly: bool = False):
        self.path = Path(path) if path else default_db_path()
        if readonly:
            # Readers (reports) must leave a recorded store byte for byte as it was: no WAL switch, no migration.
            if not self.path.is_file():
                raise KernelProError(f"no run store at {self.path}; pass --db PATH")
            try:
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30,
                                          isolation_level=None)
                self.db.row_factory = sqlite3.Row
                row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            except sqlite3.DatabaseError as e:
                raise KernelProError(f"{self.path} is not a KernelPro run store ({e}); pass --db PATH") from None
            if row is None or int(row["value"]) > SCHEMA_VERSION:
                raise KernelProError(f"{self.path}: schema {row and row['value']} not readable by this kernelpro "
                                     f"(v{SCHEMA_VERSION})")
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise KernelProError(f"cannot open run store {self.path}: {e}; pass --db PATH to use another file") from None
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise KernelProError(f"{self.path} is not a KernelPro run store ({e}); pass --db PATH to use another file") from None

    def _migrate(self) -> None:
        # executescript commits on its own, so it runs outside tx(); CREATE IF NOT EXISTS is idempotent.
        self.db.executescript(SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is not None and int(row["value"]) > SCHEMA_VERSION:
            raise KernelProError(
                f"{self.path} has schema v{row['value']}, newer than this kernelpro (v{SCHEMA_VERSION}); upgrade kernelpro")
        cols = {r["name"] for r in self.db.execute("PRAGMA table_info(runs)")}
        with self.tx() as db:
            for col, typ in (("pid", "INTEGER"), ("heartbeat", "REAL")):   # v1 -> v2
                if col not in cols:
                    db.execute(f"ALTER TABLE runs ADD COLUMN {col} {typ}")
            db.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                       (str(SCHEMA_VERSION),))

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # -- runs -------------------------------------------------------------------------------------
    def new_run(self, kind: str, suite: str | None, config: dict[str, Any]) -> int:
        now = time.time()
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO runs (kind, suite, config, status, host, created, pid, heartbeat) VALUES (?,?,?,?,?,?,?,?)",
                (kind, suite, json.dumps(config, default=str), "running", socket.gethostname(), now, os.getpid(), now))
            return int(cur.lastrowid)

    def _row(self, row: sqlite3.Row) -> dict[str, Any]:
        out = {**dict(row), "config": json.loads(row["config"])}
        out.setdefault("pid", None)
        out.setdefault("heartbeat", None)
        if out["status"] == "running" and self._dead(out):
            out["status"] = "interrupted"    # died without saying so (kill -9, power loss)
        return out

    @staticmethod
    def _dead(run: dict[str, Any]) -> bool:
        """A 'running' run whose process is gone: by its pid on this host, else by a stale heartbeat."""
        if run.get("pid") is None:
            return False     # a v1 run: no way to tell
        if run.get("host") == socket.gethostname():
            try:
                os.kill(int(run["pid"]), 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False   # alive, another user's
            return False
        return time.time() - float(run.get("heartbeat") or 0) > STALE_AFTER_S

    def get_run(self, run_id: int) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise KernelProError(f"no run {run_id} in {self.path}; list runs with `kernelpro report --list`")
        return self._row(row)

    def runs(self, kind: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM runs" + (" WHERE kind=?" if kind else "") + " ORDER BY id"
        return [self._row(r) for r in self.db.execute(q, (kind,) if kind else ())]

    def set_run_status(self, run_id: int, status: str) -> None:
        with self.tx() as db:
            if status == "running":   # (re)started by this process: its pid and heartbeat say it lives
                db.execute("UPDATE runs SET status=?, finished=NULL, pid=?, heartbeat=?, host=? WHERE id=?",
                           (status, os.getpid(), time.time(), socket.gethostname(), run_id))
            else:
                db.execute("UPDATE runs SET status=?, finished=? WHERE id=?", (status, time.time(), run_id))

    def heartbeat(self, run_id: int) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET heartbeat=? WHERE id=?", (time.time(), run_id))

    # -- candidates -------------------------------------------------------------------------------
    def add_candidate(self, run_id: int, task: str, source: str, kind: str = "py", origin: str = "user",
                      parent_id: int | None = None, info: dict[str, Any] | None = None) -> int:
        """Insert a candidate, or return the id of the identical one already in this run."""
        h = source_hash(source)
        with self.tx() as db:
            row = db.execute("SELECT id FROM candidates WHERE run_id=? AND task=? AND hash=?",
                             (run_id, task, h)).fetchone()
            if row:
                return int(row["id"])
            cur = db.execute(
                "INSERT INTO candidates (run_id, task, kind, origin, source, hash, parent_id, info, created)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (run_id, task, kind, origin, source, h, parent_id, json.dumps(info or {}, default=str), time.time()))
            return int(cur.lastrowid)

    def candidate(self, candidate_id: int) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM candidates WHERE id=?", (candidate_id,)).fetchone()
        if row is None:
            raise KernelProError(f"no candidate {candidate_id} in {self.path}")
        return {**dict(row), "info": json.loads(row["info"])}

    def candidates(self, run_id: int, task: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM candidates WHERE run_id=?" + (" AND task=?" if task else "") + " ORDER BY id"
        args = (run_id, task) if task else (run_id,)
        return [{**dict(r), "info": json.loads(r["info"])} for r in self.db.execute(q, args)]

    # -- results ----------------------------------------------------------------------------------
    def record(self, table: str, candidate_id: int, ok: bool, payload: dict[str, Any],
               arch: str | None = None) -> int:
        """Store one stage's verdict (compile, verify, evaluate or profile) for a candidate."""
        if table not in RESULT_TABLES:
            raise ValueError(f"unknown result table {table!r}")
        with self.tx() as db:
            cur = db.execute(
                f"INSERT INTO {table} (candidate_id, arch, ok, payload, created) VALUES (?,?,?,?,?)",
                (candidate_id, arch, int(bool(ok)), json.dumps(payload, default=str), time.time()))
            return int(cur.lastrowid)

    def results(self, table: str, candidate_id: int) -> list[dict[str, Any]]:
        if table not in RESULT_TABLES:
            raise ValueError(f"unknown result table {table!r}")
        rows = self.db.execute(f"SELECT * FROM {table} WHERE candidate_id=? ORDER BY id", (candidate_id,))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    def latest(self, table: str, candidate_id: int) -> dict[str, Any] | None:
        rows = self.results(table, candidate_id)
        return rows[-1] if rows else None

    def finished_tasks(self, run_id: int, table: str = "evaluations") -> set[str]:
        """Tasks of a run whose candidates all have a `table` record: what --resume may skip."""
        rows = self.db.execute(
            f"SELECT c.task, COUNT(*) AS n, COUNT(r.id) AS done FROM candidates c"
            f" LEFT JOIN (SELECT DISTINCT candidate_id AS id FROM {table}) r ON r.id = c.id"
            f" WHERE c.run_id=? GROUP BY c.task", (run_id,))
        return {r["task"] for r in rows if r["n"] == r["done"]}

    # -- search trees -----------------------------------------------------------------------------
    def put_node(self, run_id: int, node_key: str, parent_key: str | None, candidate_id: int | None,
                 depth: int, visits: int, value: float, status: str, payload: dict[str, Any]) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO search_nodes (run_id, node_key, parent_key, candidate_id, depth, visits, value,"
                " status, payload, created) VALUES (?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(run_id, node_key) DO UPDATE SET candidate_id=excluded.candidate_id,"
                " visits=excluded.visits, value=excluded.value, status=excluded.status, payload=excluded.payload",
                (run_id, node_key, parent_key, candidate_id, depth, visits, value, status,
                 json.dumps(payload, default=str), time.time()))

    # -- ablation studies -------------------------------------------------------------------------
    def put_cell(self, study_run: int, arm: str, task: str, seed: int, optimize_run: int | None,
                 payload: dict[str, Any]) -> bool:
        """Record a finished (arm, task, seed) cell once; False if it was already recorded."""
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO ablation_cells (study_run, arm, task, seed, optimize_run, payload, created)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT(study_run, arm, task, seed) DO NOTHING",
                (study_run, arm, task, seed, optimize_run, json.dumps(payload, default=str), time.time()))
            return cur.rowcount == 1

    def cells(self, study_run: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM ablation_cells WHERE study_run=? ORDER BY id", (study_run,))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    def nodes(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM search_nodes WHERE run_id=? ORDER BY id", (run_id,))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]
