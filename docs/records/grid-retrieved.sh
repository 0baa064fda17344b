#!/usr/bin/env bash
# RESULTS 10.12's grid: 10.0's answerability settings re-measured with the per-example answers kept,
# so that the corrected rule (retrieved, not EM) can be read from them. One thread per queue; a
# setting whose CSV is kept already is skipped, so the same command resumes.
#   nohup nice -n 5 bash docs/records/grid-retrieved.sh >> runs/grid-retrieved.log 2>&1 &
# A second queue may run beside it from the other end (ORDER=reverse): each setting is claimed
# (runs/grid-claims/NAME, holding the queue's pid) before it starts, so no two queues run one
# setting; a claim whose process is gone is taken over. Settings are deterministic (data seed,
# greedy decoding, one thread): the order they run in changes no number.
#   ORDER=reverse nohup nice -n 5 bash docs/records/grid-retrieved.sh >> runs/grid-retrieved-2.log 2>&1 &
# KVWB names the command (default .venv/bin/kvwb); to run a frozen checkout's code:
#   KVWB="env PYTHONSAFEPATH=1 PYTHONPATH=/work/frozen-grid .venv/bin/python -m workbench.cli" nohup nice -n 5 bash ...
# PYTHONSAFEPATH=1 matters: without it `python -m` puts this folder (the main checkout) first on
# sys.path and the frozen checkout's code is never imported (what happened until 2026-12-06 01:58 UTC).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=docs/records/grid-retrieved
HOTPOT=../shared/data/hotpotqa_dev_sample.json
export KVWB_THREADS=1 OMP_NUM_THREADS=1
mkdir -p runs/grid-claims "$OUT"
claim() {  # NAME: 0 when this queue now holds the setting
  local dir=runs/grid-claims/$1
  if mkdir "$dir" 2>/dev/null; then echo $$ > "$dir/pid"; return 0; fi
  sleep 1
  local pid; pid=$(cat "$dir/pid" 2>/dev/null || echo "")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 1; fi
  echo $$ > "$dir/pid"; return 0
}
run() {  # NAME, then kvwb answerability's arguments
  local name=$1; shift
  [ -f "$OUT/$name.csv" ] && return 0
  claim "$name" || return 0
  echo "$(date -u +%FT%TZ) start $name"
  if ${KVWB:-.venv/bin/kvwb} answerability --n 30 "$@" --csv "runs/grid-retrieved-$name.csv"; then
    mv "runs/grid-retrieved-$name.csv" "$OUT/$name.csv" && echo "$(date -u +%FT%TZ) done $name"
  fi
  rm -rf "runs/grid-claims/$name"
}
settings=()  # one line per setting: NAME, then its arguments, in the pre-registered order
for L in 512 1024 2048; do
  for M in smollm2-135m gemma3-270m; do
    settings+=("$M-niah_single-$L --model $M --dataset ruler:niah_single --target-tokens $L")
    settings+=("$M-niah_multikey-$L --model $M --dataset ruler:niah_multikey --target-tokens $L")
    settings+=("$M-niah_multivalue-$L --model $M --dataset ruler:niah_multivalue --target-tokens $L --max-new-tokens 48")
    settings+=("$M-variable_tracking-$L --model $M --dataset ruler:variable_tracking --target-tokens $L")
  done
done
for M in smollm2-135m gemma3-270m; do
  for P in gold gold+2 all; do
    settings+=("$M-hotpotqa-$P --model $M --dataset hotpotqa:$HOTPOT --passages $P")
  done
done
if [ "${ORDER:-}" = reverse ]; then
  for ((i = ${#settings[@]} - 1; i >= 0; i--)); do run ${settings[$i]}; done
else
  for s in "${settings[@]}"; do run $s; done
fi
