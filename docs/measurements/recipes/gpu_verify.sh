#!/usr/bin/env bash
# Static verification needs no GPU, but the GPU machine has a different Python (3.12) and torch
# (2.11+cu130): check there that the corpus still verifies and that a load_inline candidate is read.
# Usage (repo root on the GPU machine): bash docs/measurements/recipes/gpu_verify.sh
set -u
export PYTHONPATH=$PWD KERNELPRO_DB=${KERNELPRO_DB:-/tmp/kp_gpu_verify.db}
command -v nvcc >/dev/null || echo "note: nvcc not on PATH; verify will say how to fix it"
python3 -m pytest -q tests/test_ptx.py tests/test_compile.py tests/test_sass.py tests/test_verify.py 2>&1 | tail -5
for arch in sm_90a sm_100a; do
  python3 -m kernelpro verify tests/kernels/static/common_features.cu --arch "$arch" --json \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["arch"], "compiled" if r["compiled"] else "FAILED", {k["name"]: sorted(k["sass_features"]) for k in r["kernels"]})'
done
python3 -m kernelpro verify tests/kernels/static/model_inline.py --features bulk_copy,mbarrier --json \
  | python3 -c 'import json,sys; r=json.load(sys.stdin); print("model_inline.py", r["features"], "passed" if r["passed"] else "FAILED")'
