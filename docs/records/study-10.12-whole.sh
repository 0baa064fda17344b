#!/usr/bin/env bash
# RESULTS 8's follow-up (pre-registered: results-log/2026-12-06-10.12w-whole-answer-preregistration.md):
# SmolLM2's 10.12 record rerun on the same 200 examples (data seed 1) with every answer decoded past
# its first line break and scored whole (--no-stop-at-newline), the eleven selectors the families and
# the gap need, the same budget grid and families (preregistration-10.12.json). One thread, niced,
# resumable (the same command goes on); `keep.py save runs/NAME` after each session.
#   nohup nice -n 10 bash docs/records/study-10.12-whole.sh NAME --model smollm2-135m \
#       --dataset ruler:niah_multivalue --target-tokens 1024 --max-new-tokens 48 >> runs/NAME.log 2>&1 &
# KVWB names the command, as in study-10.12.sh (a frozen checkout: PYTHONSAFEPATH=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1; shift
export KVWB_THREADS=1 OMP_NUM_THREADS=1
SEL=none,full,cacheblend,densedev,cadence,cadence-grad,bcr,epic,prophetkv,relaxkv,coin:bcr
echo "$(date -u +%FT%TZ) start $name"
${KVWB:-.venv/bin/kvwb} run "$@" --no-stop-at-newline --data-seed 1 --n 200 --selectors $SEL \
  --budgets 0.05,0.1,0.2,0.3,0.5 --preregistration docs/records/preregistration-10.12.json --out "runs/$name"
echo "$(date -u +%FT%TZ) done $name"
