"""`kernelpro fixit`: fine-tuning data from a model's own mistakes, and LoRA training on it.

export: mine (failed attempt, what went wrong, fixed version that passed, explanation) examples from
the run store. A failed candidate is linked to its fix through `parent_id` (a repair child), through
the search tree (`search_nodes.parent_key`), or, for runs without links (multi-turn PTXBench
attempts), by being the next attempt at the same task in the same run. The failure category is one of
compile_error / wrong_output / missing_feature / flagged / slow (the report's verdicts). The
explanation is the fixing model's own (candidate info `explanation`, or the prose of its `reply`) when
the fix is a direct successor, else it is written from what the compiler, verifier, harness and
profiler recorded about the two versions. Examples are deduplicated by (normalised) code hash,
balanced across tasks and categories (a cap per task x category cell; PTXBench found balance and
diversity matter more than volume), and whole tasks are held out for evaluation; held-out problem
sizes never appear in a training prompt. Output: chat-format JSONL (`{"messages": [...]}` plus
metadata columns) that TRL's SFTTrainer and `datasets.load_dataset("json", ...)` read directly.

train: LoRA SFT with TRL's SFTTrainer and PEFT on a local model folder, offline (HF_HUB_OFFLINE=1).
The loss is on the assistant turn only (prompt/completion format). Checkpoints every --save-steps,
`--resume` continues from the newest; the adapter lands in OUTPUT/adapter, servable by vLLM's
`--enable-lora --lora-modules fixit=OUTPUT/adapter`. See docs/fixit.md for the before/after recipe.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import random
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

CATEGORIES = ("compile_error", "wrong_output", "missing_feature", "flagged", "slow")
CATEGORY_TEXT = {
    "compile_error": "it does not compile",
    "wrong_output": "it compiles but its output is wrong",
    "missing_feature": "it is correct but does not use the requested architecture features",
    "flagged": "the harness's anti-gaming checks flagged it",
    "slow": "it is correct but slower than the baseline",
}
SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer for NVIDIA Hopper (sm_90a) and Blackwell (sm_100a). You repair "
    "candidate kernels so that they compile, produce correct results on every problem size, really use the "
    "architecture features the task asks for (checked in PTX, SASS and executed instructions), pass "
    "anti-gaming checks, and run fast. Explain the fix briefly, then give the complete corrected file.")
FENCE = {"py": "python", "cu": "cuda", "ptx": "ptx"}


# ------------------------------------------------------------------------------------------------
# Mining
# ------------------------------------------------------------------------------------------------

@dataclass
class Example:
    task: str
    category: str
    run_id: int
    failed_id: int
    fixed_id: int
    link: str                        # parent | search | consecutive
    hops: int
    failed_source: str
    fixed_source: str
    kind: str
    findings: str
    explanation: str
    explanation_from: str            # model | findings
    speedup_before: float | None
    speedup_after: float | None
    baseline: str | None
    arch: str | None
    failed_hash: str = ""
    fixed_hash: str = ""
    split: str = "train"

    def messages(self, description: str = "", requested: list[str] | None = None) -> list[dict[str, str]]:
        fence = FENCE.get(self.kind, "")
        ask = [f"Task `{self.task}`" + (f" on {self.arch}" if self.arch else "") + "."]
        if description:
            ask.append(description)
        if requested:
            ask.append(f"Requested architecture features: {', '.join(requested)}.")
        ask += [f"Here is a candidate:\n```{fence}\n{self.failed_source.rstrip()}\n```",
                f"It fails: {CATEGORY_TEXT[self.category]}.\n{self.findings}".rstrip(),
                "Fix it. Explain what was wrong, then give the complete corrected file."]
        answer = f"{self.explanation.strip()}\n\n```{fence}\n{self.fixed_source.rstrip()}\n```"
        return [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "\n\n".join(ask)},
                {"role": "assistant", "content": answer}]


def normalized_hash(source: str) -> str:
    """sha256 of the source with trailing blanks and blank lines dropped: whitespace edits are duplicates."""
    lines = [ln.rstrip() for ln in source.replace("\r\n", "\n").split("\n")]
    return hashlib.sha256("\n".join(ln for ln in lines if ln).encode()).hexdigest()


def _category(f: Any, slow_below: float) -> str | None:
    from kernelpro.results.facts import verdict

    v = verdict(f, slow_below=slow_below)
    return v if v in CATEGORIES else None


def _is_fix(f: Any, category: str, before: Any, slow_below: float, min_gain: float) -> bool:
    from kernelpro.results.facts import verdict

    v = verdict(f, slow_below=slow_below)
    if category == "slow":
        s0, s1 = before.speedup(), f.speedup()
        return v == "pass" and s1 is not None and (s0 is None or s1 >= s0 * min_gain)
    return v in ("pass", "slow")


def _first_line(text: str, pattern: str = r"error") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if re.search(pattern, ln, re.I)), lines[0] if lines else "")
    return hit[:300]


def _redact_sizes(text: str, heldout: list[dict[str, Any]], default: dict[str, Any]) -> str:
    """Replace any held-out size value named in `text` (e.g. `M=1000`) so it never reaches training."""
    for size in heldout:
        for k, v in size.items():
            if default.get(k) != v:
                text = re.sub(rf"\b{re.escape(str(k))}\s*[=:]\s*{re.escape(str(v))}\b", f"{k}=<held-out>", text)
    return text


def heldout_sizes(f: Any, task_sizes: tuple[list[dict], dict] | None) -> tuple[list[dict], dict]:
    """Held-out sizes to hide: the task's own, plus any the harness marked held-out in its record."""
    held, default = (list(task_sizes[0]), dict(task_sizes[1])) if task_sizes else ([], {})
    sizes = (f.correctness or {}).get("sizes") or []
    for s in sizes if isinstance(sizes, list) else []:
        if isinstance(s, dict) and isinstance(s.get("size"), dict):
            if s.get("which") == "heldout" or s.get("split") == "heldout":
                held.append(s["size"])
    return held, default


def _correctness_text(c: dict[str, Any]) -> list[str]:
    out: list[str] = []
    sizes = c.get("sizes") or c.get("per_size") or []
    hidden = 0
    for s in sizes if isinstance(sizes, list) else []:
        if not isinstance(s, dict) or s.get("ok", True):
            continue
        if s.get("which") == "heldout" or s.get("split") == "heldout":
            hidden += 1
            continue
        dims = ", ".join(f"{k}={v}" for k, v in (s.get("size") or {}).items())
        err = s.get("max_abs_err", s.get("max_abs_error"))
        out.append(f"- wrong at {dims or 'one size'}" + (f": max abs error {err:.3g}" if isinstance(err, int | float) else ""))
    if hidden:
        out.append(f"- also wrong at {hidden} held-out size(s)")
    return out


def findings_text(f: Any, category: str, task_sizes: tuple[list[dict], dict] | None = None) -> str:
    """What went wrong, from the compiler's, verifier's, harness's and profiler's records."""
    lines: list[str] = []
    if category == "compile_error":
        log = f.compile_log or f.reason
        errs = [ln.strip() for ln in log.splitlines() if re.search(r"\berror\b", ln, re.I)][:5]
        lines.append("Compiler output:\n" + ("\n".join(errs) if errs else _first_line(log) or "(no log stored)"))
    elif category == "wrong_output":
        detail = _correctness_text(f.correctness) if f.correctness else []
        lines.append("Correctness check: " + (f.reason or "output does not match the reference"))
        lines += detail
    elif category == "missing_feature":
        miss = [m for m in f.missing if not m.startswith("(")]
        lines.append("Verifier: requested feature(s) not found in the PTX/SASS: " + (", ".join(miss) or "see log"))
        if f.emitted:
            lines.append("Found: " + ", ".join(f.emitted))
        if f.verify_log and f.verify_log not in lines[0]:
            lines.append(f.verify_log.strip().splitlines()[0][:300])
    elif category == "flagged":
        lines.append("Anti-gaming flags: " + ", ".join(f.flags))
        if f.reason:
            lines.append(f.reason[:300])
    elif category == "slow":
        s = f.speedup()
        base = f.primary or "the baseline"
        lines.append(f"Timing: {s:.2f}x vs {base} (slower than the baseline)." if s else "Timing: slower than the baseline.")
        if f.advice:
            lines.append("Profiler: " + " ".join(f.advice.split())[:500])
    return _redact_sizes("\n".join(lines), *heldout_sizes(f, task_sizes))


_TOKEN = re.compile(r"\b(?:wgmma|tcgen05|cp\.async|mbarrier|ldmatrix|stmatrix|setmaxnreg|fence|elect|mma|ld|st|bar|red|atom)"
                    r"(?:\.[A-Za-z0-9_:]+)+|\b__\w+\b|<<<[^>]*>>>")


def _diff_summary(a: str, b: str) -> str:
    al, bl = a.splitlines(), b.splitlines()
    sm = difflib.SequenceMatcher(None, al, bl, autojunk=False)
    added = sum(j2 - j1 for op, _, _, j1, j2 in sm.get_opcodes() if op in ("insert", "replace"))
    removed = sum(i2 - i1 for op, i1, i2, _, _ in sm.get_opcodes() if op in ("delete", "replace"))
    ta, tb = set(_TOKEN.findall(a)), set(_TOKEN.findall(b))
    new, gone = sorted(tb - ta)[:6], sorted(ta - tb)[:6]
    parts = [f"The fix changes {removed} line(s) and adds {added}."]
    if new:
        parts.append("It introduces " + ", ".join(f"`{t}`" for t in new) + ".")
    if gone:
        parts.append("It removes " + ", ".join(f"`{t}`" for t in gone) + ".")
    changed = [ln.strip() for op, _, _, j1, j2 in sm.get_opcodes() if op in ("insert", "replace")
               for ln in bl[j1:j2] if ln.strip() and not ln.strip().startswith(("#", "//"))][:3]
    if changed:
        parts.append("Key new line(s): " + "; ".join(f"`{ln[:120]}`" for ln in changed) + ".")
    return " ".join(parts)


def generated_explanation(before: Any, after: Any, category: str, findings: str) -> str:
    what = {
        "compile_error": f"The previous version did not compile ({_first_line(before.compile_log or before.reason) or 'compiler error'}).",
        "wrong_output": "The previous version compiled but its results did not match the reference"
                        + (f" ({before.reason.split(';')[0][:200]})" if before.reason else "") + ".",
        "missing_feature": "The previous version was not using the requested features ("
                           + (", ".join(m for m in before.missing if not m.startswith("(")) or "see verifier") + ").",
        "flagged": "The harness flagged the previous version (" + ", ".join(before.flags) + "): its result "
                   "or timing did not come from doing the work.",
        "slow": "The previous version was correct but slow"
                + (f" ({before.speedup():.2f}x)" if before.speedup() else "")
                + (f"; profiling: {' '.join(before.advice.split())[:240]}" if before.advice else "") + ".",
    }[category]
    now = ["The fixed version compiles"]
    if after.correct:
        now.append("matches the reference on every tested size")
    if after.emitted:
        now.append("uses " + ", ".join(after.emitted) + (" (executed)" if after.executed else ""))
    if after.speedup() is not None:
        now.append(f"runs at {after.speedup():.2f}x vs {after.primary}")
    return f"{what} {_diff_summary(before.source, after.source)} {', '.join(now)}."


_FENCED = re.compile(r"```.*?(```|\Z)", re.S)


def model_explanation(info: dict[str, Any]) -> str | None:
    """The fixing model's own words: `explanation`, else the prose of `reply` with code blocks removed."""
    exp = info.get("explanation")
    if isinstance(exp, str) and exp.strip():
        return exp.strip()
    reply = info.get("reply") or info.get("response")
    if isinstance(reply, str):
        prose = _FENCED.sub("", reply).strip()
        if len(prose) >= 20:
            return prose
    return None


def _task_info(task_key: str) -> tuple[str, list[str], tuple[list[dict], dict] | None]:
    """(description, requested features, (held-out sizes, default size)) for a shipped task; blanks if unknown."""
    try:
        from kernelpro.suites.task import find_task

        t = find_task(task_key)
    except Exception:  # noqa: BLE001 - tasks from other suites or removed files: mine without metadata
        return "", [], None
    arch_feats = t.requested_features("sm_90a") or t.requested_features("sm_100a")
    return t.description, list(arch_feats), ([dict(s) for s in t.heldout_sizes], dict(t.default_size))


def mine(store: Any, run_ids: list[int] | None = None, slow_below: float = 1.0, min_gain: float = 1.05,
         max_hops: int = 3) -> tuple[list[Example], dict[str, int]]:
    """All (failed -> fixed) examples in the store (or in `run_ids`), before dedupe and balance."""
    from kernelpro.results.facts import candidate_facts

    runs = [r["id"] for r in store.runs()] if not run_ids else run_ids
    facts: dict[int, Any] = {}
    edges: dict[int, list[tuple[int, str]]] = defaultdict(list)
    stats: Counter = Counter()
    for rid in runs:
        store.get_run(rid)  # one clear error for an unknown run id
        cands = store.candidates(rid)
        for c in cands:
            facts[c["id"]] = candidate_facts(store, c)
        for c in cands:
            if c["parent_id"] is not None:
                edges[c["parent_id"]].append((c["id"], "parent"))
        by_key = {n["node_key"]: n for n in store.nodes(rid)}
        for n in by_key.values():
            p = by_key.get(n["parent_key"] or "")
            if p and p["candidate_id"] and n["candidate_id"] and \
                    (n["candidate_id"], "parent") not in edges[p["candidate_id"]]:
                edges[p["candidate_id"]].append((n["candidate_id"], "search"))
        per_task: dict[str, list[dict]] = defaultdict(list)
        for c in cands:
            per_task[c["task"]].append(c)
        for seq in per_task.values():
            for a, b in zip(seq, seq[1:], strict=False):
                if b["parent_id"] is None and a["origin"] != "reference" and not by_key:
                    edges[a["id"]].append((b["id"], "consecutive"))
    examples: list[Example] = []
    for cid, f in facts.items():
        cat = _category(f, slow_below)
        if cat is None:
            continue
        stats[f"failed:{cat}"] += 1
        # Breadth-first over successors: the nearest fix, so the explanation describes one step.
        frontier, seen, fix = [(cid, 0, "")], {cid}, None
        while frontier and fix is None:
            nxt = []
            for node, hops, link in frontier:
                for child, how in sorted(edges.get(node, [])):
                    if child in seen or child not in facts:
                        continue
                    seen.add(child)
                    g = facts[child]
                    if g.task != f.task:
                        continue
                    if _is_fix(g, cat, f, slow_below, min_gain):
                        fix = (child, hops + 1, link or how)
                        break
                    if hops + 1 < max_hops:
                        nxt.append((child, hops + 1, link or how))
                if fix:
                    break
            frontier = nxt
        if fix is None:
            stats[f"unfixed:{cat}"] += 1
            continue
        gid, hops, link = fix
        g = facts[gid]
        desc, requested, sizes = _task_info(f.task)
        finding = findings_text(f, cat, sizes)
        exp = model_explanation(g.info) if hops == 1 else None
        explanation = exp or generated_explanation(f, g, cat, finding)
        explanation = _redact_sizes(explanation, *heldout_sizes(f, sizes))
        examples.append(Example(
            task=f.task, category=cat, run_id=f.run_id, failed_id=f.id, fixed_id=g.id, link=link, hops=hops,
            failed_source=f.source, fixed_source=g.source, kind=store.candidate(f.id)["kind"],
            findings=finding, explanation=explanation, explanation_from="model" if exp else "findings",
            speedup_before=f.speedup(), speedup_after=g.speedup(),
            baseline=g.primary, arch=g.arch or f.arch,
            failed_hash=normalized_hash(f.source), fixed_hash=normalized_hash(g.source)))
    return examples, dict(stats)


def dedupe(examples: list[Example]) -> tuple[list[Example], int]:
    """One example per failed code (normalised hash); prefer model explanations, one-step fixes, speed."""
    best: dict[str, Example] = {}
    for e in examples:
        k = e.failed_hash
        cur = best.get(k)
        rank = (e.explanation_from == "model", -e.hops, e.speedup_after or 0.0, -e.fixed_id)
        if cur is None or rank > (cur.explanation_from == "model", -cur.hops, cur.speedup_after or 0.0, -cur.fixed_id):
            best[k] = e
    # A failed/fixed pair can also hide under two failed hashes only if the sources differ, so this is all.
    kept = sorted(best.values(), key=lambda e: e.failed_id)
    return kept, len(examples) - len(kept)


def split_tasks(tasks: list[str], holdout: list[str] | None, frac: float) -> set[str]:
    """Held-out tasks: those named (by key or bare name), else a stable hash-ordered fraction."""
    if holdout:
        wanted = set(holdout)
        chosen = {t for t in tasks if t in wanted or t.split("/", 1)[-1] in wanted}
        unknown = wanted - chosen - {t.split("/", 1)[-1] for t in chosen}
        if unknown:
            raise KernelProError(f"--holdout-tasks names no mined task: {', '.join(sorted(unknown))}; "
                                 f"tasks with examples: {', '.join(sorted(tasks))}")
        return chosen
    if frac <= 0 or len(tasks) < 2:
        return set()
    n = min(len(tasks) - 1, max(1, round(frac * len(tasks))))
    return set(sorted(tasks, key=lambda t: hashlib.sha256(t.encode()).hexdigest())[:n])


def balance(examples: list[Example], per_cell: int | None, seed: int = 0) -> tuple[list[Example], int]:
    """Cap every task x category cell; within a cell prefer distinct fixes and model explanations.

    `per_cell` None: the median size of the non-empty cells (at least 1), so no cell outweighs the
    typical one by more than its own size.
    """
    cells: dict[tuple[str, str], list[Example]] = defaultdict(list)
    for e in examples:
        cells[(e.task, e.category)].append(e)
    if not cells:
        return [], 0
    sizes = sorted(len(v) for v in cells.values())
    cap = per_cell if per_cell is not None else max(1, math.ceil(sizes[len(sizes) // 2]))
    rng = random.Random(seed)
    kept: list[Example] = []
    for key in sorted(cells):
        pool = cells[key][:]
        rng.shuffle(pool)
        pool.sort(key=lambda e: e.explanation_from != "model")
        chosen, used_fix = [], set()
        for e in pool:  # first pass: one per distinct fixed version (diversity)
            if len(chosen) < cap and e.fixed_hash not in used_fix:
                chosen.append(e)
                used_fix.add(e.fixed_hash)
        for e in pool:
            if len(chosen) < cap and e not in chosen:
                chosen.append(e)
        kept += chosen
    return sorted(kept, key=lambda e: e.failed_id), len(examples) - len(kept)


def mix_report(found: list[Example], kept: list[Example]) -> dict[str, Any]:
    tasks = sorted({e.task for e in found})
    cell = lambda xs, t, c: sum(1 for e in xs if e.task == t and e.category == c)  # noqa: E731
    return {
        "categories": list(CATEGORIES),
        "tasks": {t: {c: {"found": cell(found, t, c), "kept": cell(kept, t, c)} for c in CATEGORIES} for t in tasks},
        "kept_by_category": {c: sum(1 for e in kept if e.category == c) for c in CATEGORIES},
        "kept_by_split": dict(Counter(e.split for e in kept)),
        "explanations": dict(Counter(e.explanation_from for e in kept)),
        "links": dict(Counter(e.link for e in kept)),
        "heldout_tasks": sorted({e.task for e in kept if e.split == "eval"}),
    }


def export(store: Any, out_dir: Path, run_ids: list[int] | None = None, holdout: list[str] | None = None,
           holdout_frac: float = 0.2, per_cell: int | None = None, slow_below: float = 1.0,
           min_gain: float = 1.05, max_hops: int = 3, seed: int = 0) -> dict[str, Any]:
    examples, stats = mine(store, run_ids, slow_below, min_gain, max_hops)
    if not examples:
        raise KernelProError(f"no failed-then-fixed attempts in {store.path}"
                             f"{' for runs ' + ','.join(map(str, run_ids)) if run_ids else ''}; run "
                             "`kernelpro optimize` (its repair children are the fixes) and export again")
    unique, dups = dedupe(examples)
    heldout = split_tasks(sorted({e.task for e in unique}), holdout, holdout_frac)
    for e in unique:
        e.split = "eval" if e.task in heldout else "train"
    train, dropped = balance([e for e in unique if e.split == "train"], per_cell, seed)
    evals = [e for e in unique if e.split == "eval"]  # evaluation keeps every held-out example
    kept = train + evals
    out_dir.mkdir(parents=True, exist_ok=True)
    task_meta: dict[str, tuple] = {}
    for name, rows in (("train", train), ("eval", evals)):
        with open(out_dir / f"{name}.jsonl", "w") as fh:
            for e in rows:
                if e.task not in task_meta:
                    task_meta[e.task] = _task_info(e.task)
                desc, requested, _ = task_meta[e.task]
                rec = {"messages": e.messages(desc, requested), "task": e.task, "category": e.category,
                       "split": e.split, "eval_sizes": "heldout" if e.split == "eval" else "shown",
                       "meta": {k: v for k, v in asdict(e).items()
                                if k not in ("failed_source", "fixed_source", "findings", "explanation", "task",
                                             "category", "split")}}
                fh.write(json.dumps(rec) + "\n")
    mix = mix_report(unique, kept)
    mix.update(mined=len(examples), duplicates=dups, dropped_by_balance=dropped, stats=stats,
               train=len(train), eval=len(evals), files={"train": str(out_dir / "train.jsonl"),
                                                          "eval": str(out_dir / "eval.jsonl")})
    (out_dir / "mix.json").write_text(json.dumps(mix, indent=2))
    return mix


def print_mix(mix: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    short = {"compile_error": "compile", "wrong_output": "wrong", "missing_feature": "feature",
             "flagged": "flagged", "slow": "slow"}
    table = Table(title="fixit mix: kept/found per task x category")
    table.add_column("task")
    table.add_column("split")
    for c in CATEGORIES:
        table.add_column(short[c], justify="right")
    held = set(mix["heldout_tasks"])
    for t, row in mix["tasks"].items():
        table.add_row(t, "eval" if t in held else "train",
                      *[f"{row[c]['kept']}/{row[c]['found']}" if row[c]["found"] else "-" for c in CATEGORIES])
    table.add_row("total", "", *[str(mix["kept_by_category"][c]) for c in CATEGORIES])
    con = Console()
    con.print(table)
    con.print(f"mined {mix['mined']} pairs, {mix['duplicates']} duplicate(s) removed, {mix['dropped_by_balance']} "
              f"dropped to balance; train {mix['train']}, eval {mix['eval']} (held-out tasks: "
              f"{', '.join(mix['heldout_tasks']) or 'none'}); explanations {mix['explanations']}, links {mix['links']}")
    con.print(f"wrote {mix['files']['train']}, {mix['files']['eval']} and mix.json")


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------

@dataclass
class TrainConfig:
    data: str
    model: str
    output: str
    eval_data: str | None = None
    epochs: float = 1.0
    max_steps: int = -1
    lr: float = 2e-4
    batch_size: int = 1
    grad_accum: int = 8
    max_length: int = 8192
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    modules_to_save: list[str] = field(default_factory=list)   # trained in full (e.g. lm_head)
    save_steps: int = 50
    logging_steps: int = 10
    warmup_ratio: float = 0.03
    seed: int = 0
    precision: str = "auto"          # auto | bf16 | fp16 | fp32
    gradient_checkpointing: bool = True
    full_loss: bool = False          # train on the prompt too
    resume: bool = False
    progress: bool = True


def _data_files(path: str, name: str) -> str:
    p = Path(path)
    if p.is_dir():
        p = p / f"{name}.jsonl"
    if not p.is_file():
        raise KernelProError(f"no training data at {p}; run `kernelpro fixit export -o DIR` and pass that DIR")
    return str(p)


def _to_prompt_completion(row: dict[str, Any]) -> dict[str, Any]:
    msgs = row["messages"]
    return {"prompt": msgs[:-1], "completion": msgs[-1:]}


def _check_lengths(ds: Any, tok: Any, cfg: TrainConfig, files: dict[str, str]) -> None:
    """Examples whose prompt alone fills --max-length have nothing left to learn from: say so up front."""
    rows = ds["train"]
    n_long = 0
    for row in rows:
        prompt = row["prompt"] if "prompt" in row else row["messages"][:-1]
        ids = tok.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        n_long += len(ids) >= cfg.max_length
    if n_long == len(rows):
        raise KernelProError(f"every example in {files['train']} has a prompt of --max-length {cfg.max_length} tokens "
                             "or more, so no answer token would be trained; raise --max-length")
    if n_long:
        print(f"fixit train: {n_long} of {len(rows)} examples have prompts over --max-length {cfg.max_length} "
              "and are skipped; raise --max-length to keep them")


def train(cfg: TrainConfig) -> dict[str, Any]:
    # No downloads at run time: everything must come from the local model folder.
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import datasets
        import torch
        import transformers
        from peft import LoraConfig
        from trl import SFTConfig, SFTTrainer
    except ImportError as e:
        raise KernelProError(f"fixit train needs trl, peft, transformers, datasets and accelerate ({e.name} is "
                             "missing): pip install 'kernelpro[train]'") from None
    model_dir = Path(cfg.model).expanduser()
    if not (model_dir / "config.json").is_file():
        raise KernelProError(f"{model_dir} is not a local model folder (no config.json); download the model "
                             "beforehand and pass its folder (nothing is fetched at run time)")
    train_file = _data_files(cfg.data, "train")
    eval_file = _data_files(cfg.eval_data, "eval") if cfg.eval_data else None
    files = {"train": train_file, **({"eval": eval_file} if eval_file else {})}
    ds = datasets.load_dataset("json", data_files=files)
    for split in ds:
        if "messages" not in ds[split].column_names:
            raise KernelProError(f"{files[split]} has no 'messages' column; it is not a fixit export")
        drop = [c for c in ds[split].column_names if c != "messages"]
        ds[split] = ds[split].remove_columns(drop)
        if not cfg.full_loss:
            ds[split] = ds[split].map(_to_prompt_completion, remove_columns=["messages"])
    tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if not getattr(tok, "chat_template", None):
        raise KernelProError(f"the tokenizer in {model_dir} has no chat template; add one to its "
                             "tokenizer_config.json (the data is in chat format)")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    _check_lengths(ds, tok, cfg, files)
    cuda = torch.cuda.is_available()
    prec = cfg.precision
    if prec == "auto":
        prec = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[prec]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=dtype)
    out = Path(cfg.output)
    resume_from = None
    if cfg.resume:
        ckpts = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
        if not ckpts:
            raise KernelProError(f"--resume: no checkpoint-* folder in {out}; start without --resume")
        resume_from = str(ckpts[-1])
    targets: str | list[str] = cfg.target_modules[0] if cfg.target_modules == ["all-linear"] else cfg.target_modules
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM", modules_to_save=cfg.modules_to_save or None)
    # transformers 5 folded warmup_ratio into warmup_steps (a float < 1 is a ratio); 4.x has both.
    import inspect

    warmup = ({"warmup_ratio": cfg.warmup_ratio} if "warmup_ratio" in inspect.signature(SFTConfig).parameters
              else {"warmup_steps": cfg.warmup_ratio})
    args = SFTConfig(
        output_dir=str(out), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps, learning_rate=cfg.lr,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        max_length=cfg.max_length, logging_steps=cfg.logging_steps, logging_first_step=True,
        save_steps=cfg.save_steps, save_total_limit=3, seed=cfg.seed, **warmup,
        bf16=prec == "bf16", fp16=prec == "fp16", use_cpu=not cuda, report_to="none",
        gradient_checkpointing=cfg.gradient_checkpointing, disable_tqdm=not cfg.progress,
        eval_strategy="steps" if eval_file else "no", eval_steps=cfg.save_steps if eval_file else None,
        completion_only_loss=None if cfg.full_loss else True, dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds["train"],
                         eval_dataset=ds["eval"] if eval_file else None, processing_class=tok, peft_config=lora)
    result = trainer.train(resume_from_checkpoint=resume_from)
    adapter = out / "adapter"
    trainer.save_model(str(adapter))
    tok.save_pretrained(str(adapter))
    losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
    summary = {"steps": trainer.state.global_step, "train_loss": result.training_loss, "losses": losses,
               "eval": [h for h in trainer.state.log_history if "eval_loss" in h], "adapter": str(adapter),
               "resumed_from": resume_from, "model": str(model_dir), "precision": prec,
               "config": asdict(cfg)}
    (out / "train_log.json").write_text(json.dumps(summary, indent=2))
    return summary


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="fixit_command", metavar="{export,train}",
                           help="export: write the failed-then-fixed pairs as JSONL; train: LoRA on them")
    e = sub.add_parser("export", help="mine failed->fixed pairs from the run store into chat JSONL")
    # `kernelpro fixit export --db X` must work too, not only `kernelpro fixit --db X export`;
    # SUPPRESS keeps an absent flag here from overwriting the parent's value.
    e.add_argument("--db", default=argparse.SUPPRESS, help="run store to mine (default as for `kernelpro fixit`)")
    e.add_argument("-o", "--output", required=True, help="folder for train.jsonl, eval.jsonl and mix.json")
    e.add_argument("--runs", help="comma-separated run ids (default: every run in the store)")
    e.add_argument("--holdout-tasks", help="comma-separated tasks (suite/name or name) kept for evaluation")
    e.add_argument("--holdout-frac", type=float, default=0.2,
                   help="fraction of tasks held out when --holdout-tasks is not given (default 0.2)")
    e.add_argument("--per-cell", type=int, help="cap per task x category (default: median cell size)")
    e.add_argument("--slow-below", type=float, default=1.0,
                   help="a correct candidate slower than this speedup counts as 'slow' (default 1.0)")
    e.add_argument("--min-gain", type=float, default=1.05,
                   help="a fix of a slow candidate must be at least this much faster (default 1.05)")
    e.add_argument("--max-hops", type=int, default=3, help="how many attempts a fix may be away (default 3)")
    e.add_argument("--seed", type=int, default=0,
                   help="seed of the train/validation split (default 0)")
    t = sub.add_parser("train", help="LoRA SFT with TRL on an exported dataset and a local model folder")
    t.add_argument("--data", required=True, help="export folder (uses train.jsonl) or a JSONL file")
    t.add_argument("--model", required=True, help="local model folder (config.json, weights, tokenizer)")
    t.add_argument("-o", "--output", required=True, help="folder for checkpoints, adapter/ and train_log.json")
    t.add_argument("--eval-data", help="export folder (uses eval.jsonl) or JSONL for periodic eval loss")
    t.add_argument("--epochs", type=float, default=1.0,
                   help="passes over the training set (default 1)")
    t.add_argument("--max-steps", type=int, default=-1, help="stop after this many optimizer steps")
    t.add_argument("--lr", type=float, default=2e-4,
                   help="learning rate (default 2e-4)")
    t.add_argument("--batch-size", type=int, default=1,
                   help="examples per device step (default 1)")
    t.add_argument("--grad-accum", type=int, default=8,
                   help="steps whose gradients are summed before an update (default 8)")
    t.add_argument("--max-length", type=int, default=8192, help="tokens per example (longer are truncated)")
    t.add_argument("--lora-r", type=int, default=16,
                   help="LoRA rank (default 16)")
    t.add_argument("--lora-alpha", type=int, default=32,
                   help="LoRA scaling alpha (default 32)")
    t.add_argument("--lora-dropout", type=float, default=0.05,
                   help="dropout on the LoRA layers (default 0.05)")
    t.add_argument("--target-modules", default="all-linear", help="comma-separated module names or all-linear")
    t.add_argument("--modules-to-save", default="",
                   help="comma-separated modules trained in full besides the LoRA ones (e.g. lm_head)")
    t.add_argument("--save-steps", type=int, default=50,
                   help="save a checkpoint every N optimizer steps (default 50)")
    t.add_argument("--logging-steps", type=int, default=10,
                   help="log the loss every N steps (default 10)")
    t.add_argument("--warmup-ratio", type=float, default=0.03,
                   help="fraction of steps spent warming the learning rate up (default 0.03)")
    t.add_argument("--seed", type=int, default=0,
                   help="random seed of training (default 0)")
    t.add_argument("--precision", choices=("auto", "bf16", "fp16", "fp32"), default="auto",
                   help="weights' precision: auto (bf16 on a GPU that has it, else fp32), bf16, fp16 or fp32")
    t.add_argument("--no-gradient-checkpointing", action="store_true",
                   help="keep activations instead of recomputing them (faster, more memory)")
    t.add_argument("--full-loss", action="store_true", help="also train on the prompt tokens")
    t.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    if args.fixit_command == "export":
        from kernelpro.results.store import Store

        runs = None
        if args.runs:
            try:
                runs = [int(x) for x in args.runs.split(",") if x.strip()]
            except ValueError:
                raise KernelProError(f"--runs takes comma-separated run ids, got {args.runs!r}") from None
        holdout = [x.strip() for x in args.holdout_tasks.split(",") if x.strip()] if args.holdout_tasks else None
        mix = export(Store(args.db), Path(args.output), runs, holdout, args.holdout_frac, args.per_cell,
                     args.slow_below, args.min_gain, args.max_hops, args.seed)
        print_mix(mix)
        return 0
    if args.fixit_command == "train":
        cfg = TrainConfig(
            data=args.data, model=args.model, output=args.output, eval_data=args.eval_data, epochs=args.epochs,
            max_steps=args.max_steps, lr=args.lr, batch_size=args.batch_size, grad_accum=args.grad_accum,
            max_length=args.max_length, lora_r=args.lora_r, lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout, target_modules=[m.strip() for m in args.target_modules.split(",")],
            modules_to_save=[m.strip() for m in args.modules_to_save.split(",") if m.strip()],
            save_steps=args.save_steps, logging_steps=args.logging_steps, warmup_ratio=args.warmup_ratio,
            seed=args.seed, precision=args.precision, gradient_checkpointing=not args.no_gradient_checkpointing,
            full_loss=args.full_loss, resume=args.resume, progress=not args.no_progress)
        s = train(cfg)
        first, last = (s["losses"][0][1], s["losses"][-1][1]) if s["losses"] else (None, None)
        print(f"trained {s['steps']} steps; loss {first} -> {last}; adapter in {s['adapter']}; "
              f"log {Path(args.output) / 'train_log.json'}")
        return 0
    raise KernelProError("choose a sub-command: `kernelpro fixit export -o DIR` or `kernelpro fixit train ...`")
