#!/usr/bin/env bash
# RESULTS 10.12's selector study on a setting its rule picked: n = 200 fresh examples (data seed 1),
# the sixteen selectors of 10.4 / 10.8 over the budget grid 0.05 .. 0.5, the families of
# docs/records/preregistration-10.12.json copied beside the run before its first example
# (kvwb run --preregistration). One thread, niced, resumable (the same command goes on).
#   nohup nice -n 5 bash docs/records/study-10.12.sh NAME --model M --dataset D [--target-tokens L] \
#       [--passages P] [--max-new-tokens 48] >> runs/NAME.log 2>&1 &
# then `.venv/bin/python docs/records/keep.py save runs/NAME` after each session, and at the end
#   kvwb summary runs/NAME --preregistered          # the families, Holm within each
#   kvwb summary runs/NAME --measure em --contrast ...@0.2      # secondary, as 10.12 says
# KVWB names the command, as in grid-retrieved.sh (a frozen checkout: PYTHONSAFEPATH=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1; shift
export KVWB_THREADS=1 OMP_NUM_THREADS=1
SEL=none,full,random,cacheblend,relay,densedev,cadence,cadence-grad,bcr,bcr:grow,bcr:single,qattn,epic,prophetkv,relaxkv,coin:bcr
echo "$(date -u +%FT%TZ) start $name"
${KVWB:-.venv/bin/kvwb} run "$@" --data-seed 1 --n 200 --selectors $SEL --budgets 0.05,0.1,0.2,0.3,0.5 \
  --preregistration docs/records/preregistration-10.12.json --out "runs/$name"
echo "$(date -u +%FT%TZ) done $name"
