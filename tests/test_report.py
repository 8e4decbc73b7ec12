"""kernelpro report: one self-contained HTML file from a store holding bench and optimize runs."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from trajectory_data import populated_store

from kernelpro.cli import main as cli
from kernelpro.report.html import summary_row
from kernelpro.results.facts import load_run


@pytest.fixture()
def report(tmp_path: Path):
    store, ids = populated_store(tmp_path / "runs.db")
    out = tmp_path / "r" / "report.html"
    run_ids = [ids["bench_a"], ids["bench_b"], ids["optimize"][0]]
    assert cli(["report", "--db", str(store.path), *map(str, run_ids), "-o", str(out)]) == 0
    return store, ids, out.read_text()


def svgs(html: str) -> list[ET.Element]:
    # Each inline SVG must be well-formed XML on its own (escaping of task names, titles, labels).
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", html, re.S)]


def test_self_contained(report):
    _, _, html = report
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "http://" not in html and "https://" not in html and "@import" not in html
    assert "<link" not in html and not re.search(r"<script[^>]+src=", html)


def test_plots_are_inline_svg(report):
    _, _, html = report
    els = svgs(html)
    classes = Counter(e.get("class") for e in els)
    assert classes["plot fastp"] == 1 and classes["plot"] == 1  # fast_p curves, speedup histogram
    assert classes["heat"] == 3 and classes["tree"] == 1
    fastp = next(e for e in els if e.get("class") == "plot fastp")
    assert len(fastp.findall("polyline")) == 3  # one curve per run


def test_numbers_match_the_store(report):
    store, ids, html = report
    a = summary_row(load_run(store, ids["bench_a"]))
    # gemm 1.4x and softmax 1.7x are correct and faster; attn is correct but 0.8x; layernorm lacks tma.
    assert (a["tasks"], a["correct"], a["fast_1"], a["baseline"]) == (4, 3, 0.5, "cublas")
    assert abs(a["geomean"] - (1.4 * 1.7 * 0.8) ** (1 / 3)) < 1e-9
    b = summary_row(load_run(store, ids["bench_b"]))
    assert b["fast_1"] == 0.25  # without hardware docs only softmax beats cuBLAS
    assert "1.400x" in html and "0.980x" in html
    # side-by-side comparison shows both bench runs' verdicts per task
    assert "Side-by-side" in html and html.count("missing_feature") >= 3


def test_heat_map_declared_emitted_executed(report):
    _, ids, html = report
    heat = [e for e in svgs(html) if e.get("class") == "heat"][0]
    tips = {t.text for t in heat.iter("title")}
    assert "ptxbench/gemm_bf16: wgmma: emitted and executed (declared)" in tips
    assert "ptxbench/gemm_bf16: mbarrier: emitted in PTX/SASS (declared)" in tips
    assert "ptxbench/layernorm_bf16: tma: declared but not found" in tips
    assert "ptxbench/gemm_bf16: bulk_copy: not declared, not used" in tips


def test_search_tree_verdicts(report):
    _, _, html = report
    tree = [e for e in svgs(html) if e.get("class") == "tree"][0]
    verdicts = Counter(g.get("data-verdict") for g in tree.iter("g"))
    assert verdicts == {"pass": 6, "compile_error": 2, "wrong_output": 1, "missing_feature": 1, "slow": 1,
                        "flagged": 1, "pending": 1}
    assert len(tree.findall(".//line")) == 12  # 13 nodes, 12 edges
    best = [c for c in tree.iter("circle") if c.get("stroke-width") == "3"]
    assert len(best) == 1 and "n10" in best[0].find("title").text and "1.800x" in best[0].find("title").text
    labels = [t.text for t in tree.iter("text") if t.text]
    assert "1.80x" in labels and "0.60x" in labels


def test_list_and_errors(tmp_path: Path, capsys):
    store, ids = populated_store(tmp_path / "runs.db")
    assert cli(["report", "--db", str(store.path), "--list"]) == 0
    out = capsys.readouterr().out
    assert "optimize" in out and "bench" in out
    assert cli(["report", "--db", str(store.path), "999"]) == 1
    err = capsys.readouterr().err
    assert "no run 999" in err and "Traceback" not in err
    # Default output name from the run ids, in the current folder.
    assert cli(["report", "--db", str(store.path), str(ids["multiturn"]), "-o",
                str(tmp_path / "ro" / "x.html")]) == 0
    assert (tmp_path / "ro" / "x.html").stat().st_size > 2000


def test_agent_outcome_flags_are_not_all_gaming_flags(tmp_path):
    """Regression: the agent's outcome payload lists every failed check under `flags` (wrong_output,
    crash, ...); only anti-gaming checks may make a candidate 'flagged' (seen in a protocol run, where
    Fixit then filed wrong outputs as flagged)."""
    from kernelpro.results.facts import candidate_facts, verdict
    from kernelpro.results.store import Store

    s = Store(tmp_path / "r.db")
    run = s.new_run("optimize", "t", {})
    wrong = s.add_candidate(run, "t/x", "a", origin="llm")
    s.record("evaluations", wrong, False, {"ok": False, "correct": False, "stage": "correctness",
                                           "flags": ["wrong_output"], "reason": "wrong_output: rel_norm 1.2"})
    cheat = s.add_candidate(run, "t/x", "b", origin="llm")
    s.record("evaluations", cheat, False, {"ok": False, "correct": True, "stage": "gaming", "flags": ["output_cached"]})
    assert verdict(candidate_facts(s, s.candidate(wrong))) == "wrong_output"
    assert verdict(candidate_facts(s, s.candidate(cheat))) == "flagged"


def test_report_leaves_a_recorded_store_byte_for_byte(tmp_path: Path, capsys):
    # Regression: opening a store to report on it switched it to WAL mode, rewriting a measurement file.
    import hashlib
    import sqlite3

    store, ids = populated_store(tmp_path / "runs.db")
    store.close()
    db = tmp_path / "runs.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=DELETE")        # as a store copied into docs/ would be after a checkpoint
    con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert cli(["report", "--db", str(db), str(ids["optimize"][0]), "-o", str(tmp_path / "x.html")]) == 0
    assert cli(["report", "--db", str(db), "--list"]) == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert cli(["report", "--db", str(tmp_path / "missing.db"), "--list"]) == 1
    assert "no run store at" in capsys.readouterr().err
