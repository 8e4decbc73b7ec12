#!/usr/bin/env bash
# The README's newcomer path on one GPU, every command's output captured at 80 columns and without a
# terminal (stdout is a file), for docs/newcomer_transcript.md. Runs from the repo root; writes under
# $OUT: transcript.txt (all commands, in order), report.html (the bench run's page), runs.db. ~3-4 min.
set -u
OUT=${OUT:-/tmp/kp_newcomer}
mkdir -p "$OUT"
export COLUMNS=80 KERNELPRO_DB="$OUT/runs.db"
T="$OUT/transcript.txt"
: > "$T"
step() {   # step CMD...: the command line, its output (stdout+stderr), its exit code and wall time
  echo "\$ $*" >> "$T"
  local t0=$SECONDS
  timeout "${KP_STEP_TIMEOUT:-270}" "$@" < /dev/null >> "$T" 2>&1
  echo "[exit $?, $((SECONDS - t0)) s]" >> "$T"
  echo >> "$T"
}
date -u +"%F %T UTC" >> "$T"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$T" 2>&1
echo >> "$T"
step python3 -m kernelpro doctor
step python3 -m kernelpro tasks ptxbench
# Three tasks keep the recipe within its time: a memory-bound one, the GEMM, and an attention forward
# (KP_BENCH_TASKS=" " runs the whole suite, as the README does).
# shellcheck disable=SC2086
step python3 -m kernelpro bench ptxbench --solutions reference \
    ${KP_BENCH_TASKS:---task rmsnorm_bf16 --task gemm_bf16 --task attn_fwd_bf16_d128}
step python3 -m kernelpro verify kernelpro/suites/ptxbench/reference/gemm_bf16.py --task gemm_bf16 --arch sm_90a
step python3 -m kernelpro verify kernelpro/suites/ptxbench/reference/gemm_bf16.py --task gemm_bf16 --arch sm_100a
step python3 -m kernelpro report --list
RUN=$(python3 -c "import os, sqlite3; print(sqlite3.connect(os.environ['KERNELPRO_DB']).execute(
    \"SELECT max(id) FROM runs WHERE kind='bench'\").fetchone()[0])")
step python3 -m kernelpro report "$RUN"
cp "$OUT/reports/report-$RUN.html" "$OUT/report.html" 2>/dev/null
step python3 -m kernelpro optimize --help
cat "$T"
