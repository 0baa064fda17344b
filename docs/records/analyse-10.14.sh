#!/usr/bin/env bash
# Every reading that RESULTS 10.14 pre-registered (docs/results-log/2026-12-05-10.14-preregistration.md:
# descriptive, no test), in its entry's order, in one command, so that the write-up chooses nothing
# after the data are seen:
#   bash docs/records/analyse-10.14.sh RUN > /tmp/readings-10.14.md
# RUN: the run folder (`.venv/bin/python docs/records/keep.py restore evidence-hotpotqa-smollm2` brings
# the kept one back). Refuses a run short of the n its command asked for; PARTIAL=1 reads one anyway,
# labelled partial. KVWB names the command, PY the python.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: analyse-10.14.sh RUN" >&2; exit 2; }
run=$(realpath "$1")   # before the cd below
cd "$(dirname "$0")/../.."
KVWB=${KVWB:-.venv/bin/kvwb}
PY=${PY:-.venv/bin/python}

read -r done asked < <("$PY" - "$run" <<'PYEOF'
import json, sys
from pathlib import Path
from workbench.runstore import load_sweep

folder = Path(sys.argv[1])
print(len(load_sweep(folder).examples), json.loads((folder / "manifest.json").read_text())["args"]["n"])
PYEOF
)
label=""
if [ "$done" -lt "$asked" ]; then
  [ "${PARTIAL:-0}" = 1 ] || { echo "$run holds $done of its $asked examples: 10.14 is read at n = $asked (PARTIAL=1 reads it labelled partial)" >&2; exit 1; }
  label=" (PARTIAL: $done of $asked examples)"
fi

out=$(mktemp)   # the readings are printed whole at the end, or not at all
trap 'rm -f "$out"' EXIT
{
echo "# 10.14's pre-registered readings of $run$label"
echo
echo "## 1. Per selector and budget: evidence recall and precision over the examples with evidence in the pool"
echo "(their count in the recall table's heading; precision's where fewer); each scorer's average precision"
echo "against the evidence rows beside chance; EM, retrieved and flips beside them: the summary as in every"
echo "sweep. 10.14 is descriptive: the summary's tests, intervals and gap readings are printed as in every"
echo "sweep and are not 10.14 readings"
echo
$KVWB summary "$run"
echo
echo "## 2. Per layer: the question's attention mass on the evidence rows under dense, the splice and each selector at b = 0.2 (means over examples)"
echo "(none and full are the splice and dense again, left out)"
echo
"$PY" - "$run" <<'PYEOF'
import sys
from workbench.experiments.evidence import attention_by_layer, evidence_tables
from workbench.report.markdown import markdown_table
from workbench.runstore import load_sweep

_, attention = evidence_tables(load_sweep(sys.argv[1]))
if attention.empty:
    sys.exit(f"{sys.argv[1]} keeps no evidence attention: 10.14's per-layer reading needs it")
n = attention[attention["cell"] == "dense"]["n"].max()
for mass, what in (("mass_mean", "mean over the question's rows and heads"),
                   ("mass_last", "the question's last row, mean over heads")):
    print(f"### {mass}: {what}; n = {n} examples with evidence in the context\n")
    table = attention_by_layer(attention, 0.2, mass)
    cells = table.columns[1:]
    # a mass is a share of attention spread over a long context (RESULTS section 9, read at n = 12: about
    # 0.03): four decimals, where the summary's tables print three
    table[cells] = table[cells].map(lambda v: "–" if v != v else f"{v:.4f}")
    print(markdown_table(table))
    print()
PYEOF
} > "$out"
cat "$out"
