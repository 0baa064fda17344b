#!/usr/bin/env bash
# The GPU run (issues 16 and 30) in four parts, in this order, each writing its own file under
# $OUT as it goes (`kvwb bench gpu PART`, workbench/bench/gpu_run.py):
#   versions.json   every version it runs with, against the versions here (.whl/versions.txt)
#   exactness.json  splice = dense at layer 0, full repair = dense, batched cells = serial repair,
#                   no host sync in the layer loops: Llama-3.2-1B shape, bf16 and fp32, 2048 tokens
#   timing.md       dense, splice, scoring, repair, TTFT and a whole Diagnosis for the 8B and 1B
#                   shapes at 4096, 2048 and 1024 tokens (longest first), beside BCR's Table 10
#   gemma.md        the same checks and one timing row for a Gemma-3-1B shape (sliding windows)
#                   at 4096 tokens, if time is left
# Each part runs under its own time limit, capped by what is left of BUDGET_S (the whole script,
# default 420 s: a machine's start, about a minute, and two whole runs fit 15 minutes). A part
# that fails, or is killed at its limit, leaves PART.error.txt (its exit status and output's
# tail) beside what it wrote so far; the next part runs. The exit status is the number of failed
# parts (one more when torch sees no CUDA device and SHAPES is not tiny: then only versions runs).
# On the device, after `make gpu-wheels` here:   run(command="bash bench/gpu.sh", carry=[".whl"], timeout_s=480)
# Overrides: SHAPES, LENGTHS, DTYPE, DEVICE, REPEATS, EXACT_SHAPE, EXACT_LENGTH, EXACT_DTYPES,
# GEMMA_SHAPE, GEMMA_LENGTH, PARTS (a subset, for a rerun), BUDGET_S, WHEELS (the wheels' folder;
# empty: none), GPU_BENCH_FAIL (parts that fail on purpose). SHAPES=tiny is the CPU rehearsal
# (tests/unit/test_bench_gpu.py): tiny shapes and contexts.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS BUDGET_S=${BUDGET_S:-420} OUT="${OUT:-bench/out}" WHEELS=${WHEELS-.whl}
mkdir -p "$OUT"
SHAPES=${SHAPES:-llama-3.1-8b,llama-3.2-1b}
if [[ $SHAPES == tiny ]]; then
  : "${EXACT_SHAPE:=tiny}" "${GEMMA_SHAPE:=tiny-gemma3}" "${LENGTHS:=900,800}" "${EXACT_LENGTH:=800}" "${GEMMA_LENGTH:=800}"
fi

SITE=
if [[ -n $WHEELS ]] && compgen -G "$WHEELS/*.whl" > /dev/null; then
  SITE=$(mktemp -d /tmp/kvwb-site.XXXXXX)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
    || echo "!! installing the carried wheels failed: the image's versions run"
  export PYTHONPATH="$SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c 'import importlib.metadata as m, sys
print("python", sys.version.split()[0], sys.executable)
for n in ("torch", "transformers", "huggingface-hub", "tokenizers", "safetensors", "numpy", "pandas", "plotly", "tqdm"):
    try: print(n, m.version(n))
    except m.PackageNotFoundError: print(n, "MISSING")'

FAILED=()
if [[ $SHAPES != tiny && -z ${DEVICE:-} ]] && ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "!! torch sees no CUDA device: only the versions part runs"
  PARTS=versions FAILED=(cuda)
fi

part() {  # part NAME FILE LIMIT_S ARGS...: one part, its own process, under its limit
  local name=$1 file=$2 limit=$3 left; shift 3
  [[ ",${PARTS:-versions,exactness,timing,gemma}," == *",$name,"* ]] || return 0
  left=$(( BUDGET_S - (SECONDS - START) ))
  (( limit > left )) && limit=$left
  if (( limit < 30 )); then
    echo "== $name: not run, ${left} s left of ${BUDGET_S} s"
    return 0
  fi
  echo "== $name: limit ${limit} s, at $(( SECONDS - START )) s"
  local log rc
  log=$(mktemp)
  timeout -k 5 "$limit" python3 -m workbench.cli bench gpu "$name" --out "$OUT/$file" --time-limit $(( limit - 15 )) \
    ${DEVICE:+--device "$DEVICE"} "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if (( rc != 0 )); then
    FAILED+=("$name")
    { echo "part $name exited $rc$( (( rc == 124 || rc == 137 )) && echo ": killed at its ${limit} s limit")"
      tail -n 150 "$log"; } > "$OUT/.$name.error.tmp" && mv "$OUT/.$name.error.tmp" "$OUT/$name.error.txt"
  fi
  rm -f "$log"
}

part versions versions.json 60 ${SITE:+--site "$SITE"} --manifest "${WHEELS:-.whl}/versions.txt"
part exactness exactness.json 100 --shape "${EXACT_SHAPE:-llama-3.2-1b}" --length "${EXACT_LENGTH:-2048}" \
  --dtypes "${EXACT_DTYPES:-bfloat16,float32}"
part timing timing.md 240 --shapes "$SHAPES" --lengths "${LENGTHS:-4096,2048,1024}" --dtype "${DTYPE:-bfloat16}" \
  --repeats "${REPEATS:-3}"
part gemma gemma.md 120 --shape "${GEMMA_SHAPE:-gemma-3-1b}" --length "${GEMMA_LENGTH:-4096}" \
  --dtype "${DTYPE:-bfloat16}" --repeats "${REPEATS:-3}"

[[ -n $SITE ]] && rm -rf "$SITE"
echo "== done in $(( SECONDS - START )) s; failed: ${FAILED[*]:-none}; files: $(ls "$OUT" | tr '\n' ' ')"
exit ${#FAILED[@]}
