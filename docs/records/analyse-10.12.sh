#!/usr/bin/env bash
# Every reading that RESULTS 10.12's study pre-registered, in its entry's order, in one command, so
# that the write-up chooses nothing after the data are seen
# (docs/results-log/2026-12-06-10.12-smollm2-study-preregistration.md and amendment 1):
#   bash docs/records/analyse-10.12.sh RUN OTHER > /tmp/readings.md
# RUN: the study's run folder (`.venv/bin/python docs/records/keep.py restore NAME` brings a kept one back);
# OTHER: the second setting of the one test across settings (SmolLM2: study-ruler-mk512-smollm2,
# since Gemma's grid picked none). Refuses a run short of the n its command asked for (the entry:
# no family is tested on fewer than 200); PARTIAL=1 reads one anyway, labelled partial.
# KVWB names the command, as in study-10.12.sh.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: analyse-10.12.sh RUN OTHER" >&2; exit 2; }
run=$(realpath "$1") other=$(realpath "$2")   # before the cd below
cd "$(dirname "$0")/../.."
KVWB=${KVWB:-.venv/bin/kvwb}
PY=${PY:-.venv/bin/python}

# the run's n against the n its command asked for; the families' contrasts moved to b = 0.2; A1 and
# B3 as the run's pre-registration names them (the test across settings, amendment 1's reading)
read -r done asked at02 a1 b3 < <("$PY" - "$run" <<'EOF'
import json, sys
from pathlib import Path
from workbench.experiments.families import read_preregistration
from workbench.runstore import load_sweep

folder = Path(sys.argv[1])
asked = json.loads((folder / "manifest.json").read_text())["args"]["n"]
pre = read_preregistration(folder)
if pre is None:
    sys.exit(f"{folder} keeps no preregistration.json: not a pre-registered study")
named = {name: c for family in pre.families.values() for name, c in family.items()}
missing = [name for name in ("A1", "B3") if name not in named]
if missing:
    sys.exit(f"{folder}'s pre-registration names no {' or '.join(missing)}: 10.12's readings need A1 and B3")
at02 = [c.replace("@auc", "@0.2") for c in named.values()]
print(len(load_sweep(folder).examples), asked, ",".join(at02), named["A1"], named["B3"])
EOF
)
source docs/records/analyse-common.sh   # label, contrasts_only, em_contrasts

out=$(mktemp)   # the readings are printed whole at the end, or not at all
trap 'rm -f "$out"' EXIT
{
echo "# 10.12's pre-registered readings of $run$label"
echo
echo "## 1. Primary: the families on retrieved @auc, Holm within each; the summary on retrieved"
echo "(its gap closed, area and rows to 0.9 x dense with intervals; evidence recall per selector and"
echo "budget; the gap anatomy of every cell)"
echo
$KVWB summary "$run" --measure retrieved --preregistered --read 10
echo
echo "## 2. Secondary, uncorrected: the families' contrasts on em at b = 0.2 (exact McNemar b / c; read the raw p)"
echo
contrasts_only summary "$run" --measure em "${em_contrasts[@]}" --read 10
echo
echo "## 3. Secondary, uncorrected (amendment 1): B3 ($b3) on whole-word contains over the budget grid"
echo
contrasts_only summary "$run" --measure contains --contrast "$b3" --read 10
echo
echo "## 4. The one test across settings: A1's ($a1) per-example area difference here against $other"
echo
contrasts_only summary "$run" --measure retrieved --contrast "$a1" --against "$other"
} > "$out"
cat "$out"
