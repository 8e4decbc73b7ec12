"""The worker's result record: one parser, unknown keys rejected, stored payloads round-trip."""

import pytest

from kernelpro.errors import KernelProError
from kernelpro.harness.job import Job
from kernelpro.harness.worker import failure_record
from kernelpro.results.facts import candidate_facts, verdict
from kernelpro.results.record import RESULT_SCHEMA, Result
from kernelpro.results.store import Store


def test_unknown_key_is_an_error_not_a_guess():
    with pytest.raises(KernelProError, match="unknown key.*speedup_vs_baseline"):
        Result.from_dict({"candidate": "c.py", "device": "cpu", "ok": True, "speedup_vs_baseline": 2.0})
    with pytest.raises(KernelProError, match="missing ok"):
        Result.from_dict({"candidate": "c.py", "device": "cpu"})
    with pytest.raises(KernelProError, match="schema 99"):
        Result.from_dict({"candidate": "c.py", "device": "cpu", "ok": True, "schema": 99})


def test_failure_record_round_trips_and_reads_as_a_verdict(tmp_path):
    rec = failure_record(Job(task_path="t/x.py", candidate_path="c.py", task_key="t/x"), "timeout", "killed",
                         compiled=True)
    assert rec.schema == RESULT_SCHEMA and Result.from_dict(rec.to_dict()) == rec
    st = Store(tmp_path / "r.db")
    run = st.new_run("bench", "t", {})
    cid = st.add_candidate(run, "t/x", "x = 1\n")
    st.record("evaluations", cid, rec.ok, rec.to_dict(), arch="cpu")
    f = candidate_facts(st, st.candidate(cid))
    assert f.correct is False and f.stage == "correctness" and f.reason == "timeout: killed"
    assert verdict(f) == "wrong_output"


def test_schema_1_payloads_still_read():
    old = {"schema": 1, "task": "t/x", "candidate": "c.py", "device": "cuda", "status": "passed", "ok": True,
           "reason": None, "detail": "", "compiled": True, "correct": True, "speedup": {"eager": 1.5},
           "timing": {"stats": {"candidate": {"median_ms": 2.0}, "eager": {"median_ms": 3.0}}}}
    r = Result.from_dict(old)
    assert r.passed and r.candidate_ms == 2.0 and r.baseline_ms == {"eager": 3.0} and r.build is None
