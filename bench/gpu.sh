#!/usr/bin/env bash
# Absolute times on a GPU (issue 16, next to BCR's Table 10): random-weight Llama-3.2-1B and
# Llama-3.1-8B shapes at 1024, 2048 and 4096 tokens, written as markdown to $OUT/gpu.md.
# Made for the device machine: its own Python has torch, transformers, pandas and scipy, not
# plotly. Here, `make gpu-wheels` puts the missing wheels in .whl/; the device call carries them:
#     run(command="bash bench/gpu.sh", carry=[".whl"], timeout_s=540)
# SHAPES, LENGTHS, DTYPE, DEVICE and REPEATS override the defaults (the tests run SHAPES=tiny on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 -m workbench.bench_gpu --shapes "${SHAPES:-llama-3.2-1b,llama-3.1-8b}" --lengths "${LENGTHS:-1024,2048,4096}" \
  --dtype "${DTYPE:-bfloat16}" --repeats "${REPEATS:-3}" ${DEVICE:+--device "$DEVICE"} --out "$OUT/gpu.md"
