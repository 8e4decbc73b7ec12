"""Precision and recall of each stage-two profiling tool on the labelled recorded corpus, at 80 columns.

    python3 benchmarks/profiling_tools_precision.py [--data tests/data/ncu] [--labels tests/data/ncu/labels.toml]

CPU only: the tools run on Nsight Compute profiles recorded on a GPU (tests/data/ncu/*.json) against
the labels in labels.toml (true bottleneck(s) per kernel, a reason each). A kernel marked * under
"fired on" drew the tool without being labelled with it (a false positive).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelpro.errors import KernelProError  # noqa: E402
from kernelpro.profile.scoring import load_labels, score  # noqa: E402


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def say(text: str) -> None:
    print("\n".join(textwrap.wrap(text, 80, subsequent_indent="  ")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "tests" / "data" / "ncu"), help="folder of recorded *.json")
    ap.add_argument("--labels", help="labels file (default: DATA/labels.toml)")
    a = ap.parse_args(argv)
    data = Path(a.data)
    try:
        labels = load_labels(Path(a.labels) if a.labels else data / "labels.toml")
        scores, seen = score(data, labels)
    except KernelProError as e:
        print(f"profiling_tools_precision: error: {e}", file=sys.stderr)
        return 1
    roles: dict[str, int] = {}
    for k in labels:
        roles[k.role] = roles.get(k.role, 0) + 1
    say(f"{len(labels)} labelled kernels (" + ", ".join(f"{n} {r}" for r, n in sorted(roles.items()))
        + f"), {sum(len(k.labels) for k in labels)} labels; recorded profiles, tools run on the CPU")
    print(f"{'tool':<16}{'fires':>6}{'TP':>4}{'FP':>4}{'FN':>4}{'prec':>6}{'recall':>7}  fired on (* = not labelled)")
    for s in scores:
        on = textwrap.wrap(" ".join(s.fired_on) or "-", 31) or ["-"]
        print(f"{s.tool:<16}{s.fires:>6}{s.tp:>4}{s.fp:>4}{s.fn:>4}{_pct(s.precision):>6}{_pct(s.recall):>7}  {on[0]}")
        for line in on[1:]:
            print(" " * 49 + line)
    tp, fp, fn = (sum(getattr(s, f) for s in scores) for f in ("tp", "fp", "fn"))
    print(f"{'all tools':<16}{tp + fp:>6}{tp:>4}{fp:>4}{fn:>4}{_pct(tp / (tp + fp) if tp + fp else None):>6}"
          f"{_pct(tp / (tp + fn) if tp + fn else None):>7}")
    clean = [k.name for k in labels if not k.labels]
    drew = {n: sorted(seen[n]) for n in clean if seen[n]}
    say("kernels labelled clean: " + ", ".join(clean) + "; drew findings: "
        + (", ".join(f"{n} ({' '.join(t)})" for n, t in drew.items()) if drew else "none"))
    missed = [f"{s.tool} on {m}" for s in scores for m in s.missed]
    say("missed labels: " + (", ".join(missed) if missed else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
