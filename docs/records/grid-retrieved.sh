#!/usr/bin/env bash
# RESULTS 10.12's grid: 10.0's answerability settings re-measured with the per-example answers kept,
# so that the corrected rule (retrieved, not EM) can be read from them. One queue, one thread, in the
# pre-registered order; a setting whose CSV is kept already is skipped, so the same command resumes.
#   nohup nice -n 5 bash docs/records/grid-retrieved.sh >> runs/grid-retrieved.log 2>&1 &
# KVWB names the command (default .venv/bin/kvwb); to run a frozen checkout's code:
#   KVWB="env PYTHONSAFEPATH=1 PYTHONPATH=/work/frozen-grid .venv/bin/python -m workbench.cli" nohup nice -n 5 bash ...
# PYTHONSAFEPATH=1 matters: without it `python -m` puts this folder (the main checkout) first on
# sys.path and the frozen checkout's code is never imported (what happened until 2026-12-06 01:58 UTC).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=docs/records/grid-retrieved
HOTPOT=../shared/data/hotpotqa_dev_sample.json
export KVWB_THREADS=1 OMP_NUM_THREADS=1
mkdir -p runs "$OUT"
run() {  # NAME, then kvwb answerability's arguments
  local name=$1; shift
  [ -f "$OUT/$name.csv" ] && return 0
  echo "$(date -u +%FT%TZ) start $name"
  if ${KVWB:-.venv/bin/kvwb} answerability --n 30 "$@" --csv "runs/grid-retrieved-$name.csv"; then
    mv "runs/grid-retrieved-$name.csv" "$OUT/$name.csv"
    echo "$(date -u +%FT%TZ) done $name"
  fi
}
for L in 512 1024 2048; do
  for M in smollm2-135m gemma3-270m; do
    run "$M-niah_single-$L" --model $M --dataset ruler:niah_single --target-tokens $L
    run "$M-niah_multikey-$L" --model $M --dataset ruler:niah_multikey --target-tokens $L
    run "$M-niah_multivalue-$L" --model $M --dataset ruler:niah_multivalue --target-tokens $L --max-new-tokens 48
    run "$M-variable_tracking-$L" --model $M --dataset ruler:variable_tracking --target-tokens $L
  done
done
for M in smollm2-135m gemma3-270m; do
  for P in gold gold+2 all; do
    run "$M-hotpotqa-$P" --model $M --dataset "hotpotqa:$HOTPOT" --passages $P
  done
done
