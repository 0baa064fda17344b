#!/usr/bin/env bash
# Every reading 10.12w pre-registered, in its entry's order, in one command, so that the write-up
# chooses nothing after the data are seen (docs/results-log/2026-12-06-10.12w-whole-answer-preregistration.md):
#   bash docs/records/analyse-10.12w.sh RUN FIRST > /tmp/readings-10.12w.md
# RUN: the whole-answer record (study-10.12w-mv1024-smollm2); FIRST: the first-line record of the same
# examples (study-10.12-mv1024-smollm2); `keep.py restore NAME` brings a kept one back. The pairing is
# checked first: where the two records' cells repaired different rows, nothing else is read (exit 1).
# Refuses a run short of its n; PARTIAL=1 reads one anyway, labelled partial, and runs none of its
# families or contrasts (the entry tests none on fewer than 200; the summary's per-budget b / c columns
# are printed, and are not the entry's tests). KVWB names the command.
set -euo pipefail
usage="usage: analyse-10.12w.sh RUN FIRST" need="A1"
source "$(dirname "$0")/analyse-common.sh" "$@"   # run, other, done, asked, at02, named, label, contrasts_only, em_contrasts
first=$other a1=$named
reader=${a1%%:*}   # A1's first selector: its whole answers are read for filler
# the entry tests no family on fewer than 200: a partial reading (PARTIAL=1) runs none of this run's
families=(--preregistered --read 10)
heading="the families on retrieved (whole answers) @auc, Holm within each; the summary on retrieved"
[ -z "$label" ] || { families=(); heading="PARTIAL, no family tested: the summary on retrieved (whole answers)"; }

out=$(mktemp)   # the readings are printed whole at the end, or not at all
trap 'rm -f "$out"' EXIT
{
echo "# 10.12w's pre-registered readings of $run$label"
echo
echo "## 0. The pairing: the cells both records hold repaired the same rows (n_recomputed, evidence_recall)"
echo
"$PY" - "$run" "$first" <<'EOF'
import sys
from workbench.experiments.answer_lines import pairing
from workbench.report.markdown import markdown_table
from workbench.runstore import load_sweep

paired = pairing(load_sweep(sys.argv[1]), load_sweep(sys.argv[2]))
line = (f"shared cells: {paired['shared']} of the {paired['expected']} expected; cells whose rows differ: "
        f"{len(paired['differ'])}; share whose first line here is the other record's answer: "
        f"{paired['same_first_line']:.4f}")
print(line)
if paired["shared"] == 0 or paired["shared"] != paired["expected"] or len(paired["differ"]):
    # to stderr: the readings (stdout) are printed whole or not at all
    print(line, markdown_table(paired["differ"].head(20)), sep="\n", file=sys.stderr)
    sys.exit("the pairing is broken: nothing else is read (the entry's check)")
EOF
echo
echo "## 1. Primary: $heading"
echo
$KVWB summary "$run" --measure retrieved ${families[@]+"${families[@]}"}
echo
echo "## 2. Beside it: the first-line record's summary and families on retrieved (as RESULTS 8 reads them)"
echo
$KVWB summary "$first" --measure retrieved --preregistered
echo
echo "## 3. What the whole answers name that their first lines do not (per selector and budget; splice and dense)"
echo
"$PY" - "$run" <<'EOF'
import sys
from workbench.experiments.answer_lines import first_line_table
from workbench.report.markdown import markdown_table
from workbench.runstore import load_sweep

print(markdown_table(first_line_table(load_sweep(sys.argv[1]))))
EOF
echo
echo "## 4. Secondary, uncorrected: the families' contrasts on em at b = 0.2 (exact McNemar b / c; read the raw p)"
echo
if [ -z "$label" ]; then contrasts_only summary "$run" --measure em "${em_contrasts[@]}" --read 10
else echo "(not tested on a partial run)"; fi
echo
echo "## 5. Secondary: how long the answers are (answer_tokens) and how often they run on past dense's (ran_on)"
echo
"$PY" - "$run" <<'EOF'
import sys
from workbench.report.markdown import markdown_table
from workbench.runstore import load_sweep

cells = load_sweep(sys.argv[1]).outcomes
table = cells.groupby(["selector", "budget"], sort=False).agg(
    answer_tokens=("answer_tokens", "mean"), ran_on=("ran_on", "mean")).reset_index()
print(markdown_table(table))
EOF
echo
echo "## 6. Ten whole answers of $reader at b = 0.2, read for filler (the haystack's numbers, not the needles')"
echo
"$PY" - "$run" "$reader" <<'EOF'
import sys
from workbench.experiments.answer_lines import run_examples
from workbench.runstore import load_sweep

run, reader = load_sweep(sys.argv[1]), sys.argv[2]
examples = run_examples(run)
cells = run.outcomes[(run.outcomes["selector"] == reader) & (run.outcomes["budget"] == 0.2)]
for example_id, answer, retrieved in list(zip(cells["example_id"], cells["answer"], cells["retrieved"]))[:10]:
    print(f"- {example_id}: gold {', '.join(examples[str(example_id)].gold)}; retrieved {retrieved:.2f}; "
          f"answer {answer!r}")
EOF
} > "$out"
cat "$out"
