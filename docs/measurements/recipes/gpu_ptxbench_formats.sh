#!/usr/bin/env bash
# PTXBench's own formats in KernelPro, on one H100/H200 (about 4-5 minutes):
#   1. PTXBench's five headline definitions looked up in a checkout (arg 1, default .ptxbench); the GEMM's
#      definition is read from its Harbor task text when no trace set is there (the public repo has none);
#   2. the definitions' own run() through the loader (tests/data/flashinfer_trace and the headline GEMM),
#      under both profiles, kernelpro and ptxbench, in one table;
#   3. KernelPro's TVM-FFI test kernels judged (honest: TMA + wgmma; wrong; simt: no requested feature),
#      the honest GEMM also on the headline GEMM at M=8192 against torch.matmul;
#   4. the cuDNN frontend SDPA backward beside PyTorch's at B=4, H=48, S=4096, D=128.
#
# Getting it onto a machine with no network (from the repo root, once, here):
#   echo /.ptxbench/ >> .git/info/exclude; echo /.wheels/ >> .git/info/exclude
#   mkdir -p .ptxbench && git --git-dir=<fetched PTXBench git dir> archive HEAD | tar -x -C .ptxbench
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     -d .wheels apache-tvm-ffi==0.1.15.post2 nvidia-cudnn-frontend
# and copy both folders to the GPU machine (its python3 is 3.12 with torch, nvcc and ninja):
#   OUT=/tmp/o bash docs/measurements/recipes/gpu_ptxbench_formats.sh .ptxbench
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

stamp "1. headline definitions in $CHECKOUT"
python3 $H headline "$CHECKOUT" /tmp/headline 2>&1 | tee -a "$LOG"
python3 $H gemm-solution /tmp/headline_sol 2>&1 | tee -a "$LOG"
python3 tests/flashinfer_kernels.py /tmp/sol 2>&1 | tee -a "$LOG"

stamp "2. references through the loader, both profiles"
timeout 150 $KP bench flashinfer-trace --path tests/data/flashinfer_trace --solutions reference $COMMON \
  --profile kernelpro,ptxbench 2>&1 | tee -a "$LOG"
[ -d /tmp/headline/definitions ] && timeout 90 $KP bench flashinfer-trace --path /tmp/headline --solutions reference \
  $COMMON --profile kernelpro,ptxbench 2>&1 | tee -a "$LOG"

stamp "3. TVM-FFI test kernels"
for v in honest wrong simt; do
  prof=kernelpro; [ $v = honest ] && prof=kernelpro,ptxbench
  timeout 120 $KP bench flashinfer-trace --path tests/data/flashinfer_trace --solutions /tmp/sol/$v $COMMON \
    --profile $prof 2>&1 | tee -a "$LOG"
done
[ -d /tmp/headline/definitions ] && timeout 90 $KP bench flashinfer-trace --path /tmp/headline \
  --solutions /tmp/headline_sol $COMMON --profile kernelpro,ptxbench 2>&1 | tee -a "$LOG"

stamp "4. cuDNN frontend SDPA backward beside PyTorch's"
timeout 120 python3 $H sdpa-bwd 2>&1 | tee -a "$LOG"
stamp "done"
