#!/usr/bin/env bash
# PTXBench's own formats in KernelPro, on one H100/H200. STEPS picks what runs (default all, about 14 minutes;
# split it in two runs of under 10 minutes each: STEPS=headline, then STEPS="refs tests sdpa"):
#   headline  PTXBench's five headline definitions, made by PTXBench's own code from a checkout (arg 1,
#             default .ptxbench): its attention preparation scripts, run unchanged (the backward one with
#             its sequence lengths cut to the headline S=4096), and the GEMM's definition from its Harbor
#             task text (the public repository carries no trace set); then, through the loader, under both
#             profiles (kernelpro, ptxbench), KernelPro's Hopper references as TVM-FFI solution bundles
#             (GEMM, attention forward with LSE, attention backward), timed against the definitions' own
#             run() (cuBLAS through torch, cuDNN);
#             with the executed-instruction leg (EXECUTED=on, the default), so correct_with_arch is judged;
#   refs      the definitions' own run() as the solution, through the loader;
#   tests     KernelPro's TVM-FFI test kernels on the test definitions (tests/data/flashinfer_trace):
#             honest (TMA + wgmma, both profiles; GEMM, forward and backward), wrong, simt (no requested
#             feature);
#   sdpa      the cuDNN frontend SDPA backward beside PyTorch's at B=4, H=48, S=4096, D=128.
#
# Getting it onto a machine with no network (from the repo root, once, here):
#   echo /.ptxbench/ >> .git/info/exclude; echo /.wheels/ >> .git/info/exclude
#   mkdir -p .ptxbench && git --git-dir=<fetched PTXBench git dir> archive HEAD | tar -x -C .ptxbench
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     -d .wheels apache-tvm-ffi==0.1.15.post2 nvidia-cudnn-frontend
# and copy both folders to the GPU machine (its python3 is 3.12 with torch, safetensors, nvcc and ninja):
#   OUT=/tmp/o STEPS=headline bash docs/measurements/recipes/gpu_ptxbench_formats.sh .ptxbench
# (the definitions are made again in a call that finds none under /tmp)
set -uo pipefail
CHECKOUT=${1:-.ptxbench}
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
LOG="$OUT/run.log"
export KERNELPRO_CACHE=/tmp/kpcache PYTHONUNBUFFERED=1 COLUMNS=160
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wheels/*.whl \
  || { echo "wheel install failed" | tee -a "$LOG"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
stamp() { echo "=== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
H=docs/measurements/recipes/gpu_ptxbench_formats.py
KP="python3 -m kernelpro.cli"
COMMON="--arch sm_90a --baselines eager --no-energy --executed off --trials 1 --db $OUT/bench.db"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, tvm_ffi; print('torch', torch.__version__, 'tvm_ffi', tvm_ffi.__version__)"
  python3 -c "import cudnn; print('cudnn frontend', cudnn.__version__, 'backend', cudnn.backend_version())" ; } 2>&1 | tee -a "$LOG"

STEPS=${STEPS:-headline refs tests sdpa}
has() { [[ " $STEPS " == *" $1 "* ]]; }
prepare() {   # PTXBench's headline definitions and our bundles for them, once per machine
  [ -d /tmp/headline/definitions ] && [ -d /tmp/headline_sol ] && return
  stamp "PTXBench's five headline definitions, from its own scripts in $CHECKOUT"
  rm -rf /tmp/headline /tmp/headline_sol
  timeout 240 python3 $H headline "$CHECKOUT" /tmp/headline 2>&1 | tee -a "$LOG"
  python3 $H solutions /tmp/headline_sol 2>&1 | tee -a "$LOG"
}
if has headline; then
  prepare
  # the executed leg (ncu) too, so correct_with_arch is judged from what the bundles ran
  stamp "headline: KernelPro's Hopper references as TVM-FFI bundles, both profiles, executed leg ${EXECUTED:-on}"
  timeout ${HEADLINE_S:-420} $KP bench flashinfer-trace --path /tmp/headline --solutions /tmp/headline_sol \
    ${COMMON/--executed off/--executed ${EXECUTED:-on}} --profile kernelpro,ptxbench 2>&1 | tee -a "$LOG"
fi
if has refs; then
  prepare
  stamp "refs: the definitions' own run() through the loader as the solution, both profiles"
  timeout ${REFS_S:-170} $KP bench flashinfer-trace --path /tmp/headline --solutions reference $COMMON \
    --profile kernelpro,ptxbench 2>&1 | tee -a "$LOG"
fi
if has tests; then
  stamp "tests: KernelPro's TVM-FFI test kernels on the test definitions"
  python3 tests/flashinfer_kernels.py /tmp/sol 2>&1 | tee -a "$LOG"
  for v in honest wrong simt; do
    prof=kernelpro; [ $v = honest ] && prof=kernelpro,ptxbench
    timeout ${TESTS_S:-240} $KP bench flashinfer-trace --path tests/data/flashinfer_trace --solutions /tmp/sol/$v $COMMON \
      --profile $prof 2>&1 | tee -a "$LOG"
  done
fi
if has sdpa; then
  stamp "sdpa: cuDNN frontend SDPA backward beside PyTorch's"
  timeout 120 python3 $H sdpa-bwd 2>&1 | tee -a "$LOG"
fi
stamp "done"
