#!/usr/bin/env bash
# KernelBench's own evaluator (eval_kernel_against_ref, imported from a checkout) and
# `kernelpro bench kernelbench`, side by side: all of level 1 (each problem's own Model as ModelNew),
# 10 level-2 and 5 level-3 problems sampled with seed 0, and the cases in benchmarks/kernelbench_cases/
# (degenerate constant outputs, LayerNorm affine replaced/ignored, two joined streams, a CUDA-graph
# replay, a side stream left running). Both verdicts at atol=rtol 1e-4 and 1e-2, both speedups, every
# disagreement with its reason.
#
# Needs a KernelBench checkout in the ignored folder .kb/ (root of a clone of
# ScalingIntelligence/KernelBench: .kb/src/kernelbench and .kb/KernelBench/level1..3); carry it.
# Usage (repo root, one GPU):  bash docs/measurements/recipes/gpu_kernelbench_side_by_side.sh [flags]
#   flags go to the script, e.g. --level1 20 --level2 4 --level3 2 for a shorter run.
# Budget: BUDGET seconds (default 480), KernelBench's side first (45% of it), then kernelpro's; rows a side
# did not reach are listed as not compared. Writes $OUT/side_by_side.txt and $OUT/side_by_side.json.
# Memory: KernelBench's current level-1 sizes hold up to 6 GiB per tensor, and each evaluator keeps
# several copies; on an 80 GB card five processes ran out of memory on most rows (a row that runs out of
# memory on either side is listed as not compared). So problems of 1 GiB or more (BIG_GIB) and the cases
# run one at a time, after the small ones, which run PARALLEL (default 3) kernelpro and KB_PARALLEL
# (default 2) KernelBench processes at once; a comparison longer than one call is continued in the next with
#   bash ...side_by_side.sh --prior PREVIOUS/side_by_side.json [--only kb|kp]
# which keeps every row a side finished and runs the rest.
set -u
export PYTHONPATH=$PWD
KB=${KB:-.kb}
OUT=${OUT:-/tmp/kb_side_by_side}
mkdir -p "$OUT"
if [ ! -d "$KB/src/kernelbench" ]; then
  echo "gpu_kernelbench_side_by_side: no KernelBench checkout at $KB (need $KB/src/kernelbench); carry one as .kb" >&2
  exit 1
fi
# KernelBench's package imports pydantic and python-dotenv, which the GPU image may lack: carry them as wheels in
# the ignored folder .whl/ (pip download --no-deps ... pydantic pydantic-core annotated-types typing-inspection
# python-dotenv, for the GPU machine's Python) and they are installed beside it.
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kbsite .whl/*.whl \
    && export PYTHONPATH=/tmp/kbsite:$PYTHONPATH
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1
python3 benchmarks/kernelbench_side_by_side.py --kb-path "$KB" --out "$OUT" --budget-s "${BUDGET:-480}" \
  --parallel "${PARALLEL:-3}" --kb-parallel "${KB_PARALLEL:-2}" --big-gib "${BIG_GIB:-1}" "$@"
