#!/usr/bin/env bash
# Resume 10.12w (study-10.12w-mv1024-smollm2) from its frozen worktree, on the first record's CPU kind
# only (amendment 1: docs/results-log/2026-12-07-10.12w-amendment-1-one-cpu.md): the CPU model this
# machine reports must be the one study-10.12-mv1024-smollm2's manifest records for every example it
# computed, or nothing starts. Run from the main checkout (`runs/` is its folder):
#   bash docs/records/resume-10.12w.sh [RUN OPTIONS]   (e.g. --executor ray --workers 2 --cpus-per-worker 1;
#                                                     the frozen worktree /work/frozen-whole made if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
main=$PWD
first=runs/study-10.12-mv1024-smollm2/manifest.json
[ -f "$first" ] || first=docs/records/study-10.12-mv1024-smollm2/manifest.json
want=$(.venv/bin/python - "$first" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
cpus = {s["environment"]["device"]["cpu"] for s in m["segments"]}
sys.exit(f"the first record was computed on several CPUs: {sorted(cpus)}") if len(cpus) != 1 else print(cpus.pop())
PY
)
here=$(.venv/bin/python -c "from workbench.runstore.environment import environment; print(environment()['device']['cpu'])")
if [ "$here" != "$want" ]; then
  echo "resume-10.12w.sh: this machine's CPU is '$here', the first record's '$want': 10.12w computes on '$want' only (amendment 1); nothing started" >&2
  exit 1
fi
[ -d /work/frozen-whole ] || git worktree add /work/frozen-whole c16d701
[ -e /work/frozen-whole/runs ] || ln -s "$main/runs" /work/frozen-whole/runs
cd /work/frozen-whole
KVWB="env PYTHONSAFEPATH=1 PYTHONPATH=/work/frozen-whole $main/.venv/bin/python -m workbench.cli" \
  nohup nice -n 10 bash docs/records/study-10.12-whole.sh study-10.12w-mv1024-smollm2 --model smollm2-135m \
  --dataset ruler:niah_multivalue --target-tokens 1024 --max-new-tokens 48 "$@" \
  >> "$main/runs/study-10.12w-mv1024-smollm2.log" 2>&1 &
echo "10.12w resumed on '$here' (pid $!); log: runs/study-10.12w-mv1024-smollm2.log"
