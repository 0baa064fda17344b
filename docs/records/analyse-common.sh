# Sourced by the analyse-*.sh scripts with their two arguments, after they set `usage` (their usage
# line) and `need` (the contrasts their readings name, e.g. "A1 B3"): checks the arguments (run,
# other), goes to the repository root and reads the run's pre-registration (study_plan.py): `done`,
# `asked`, `at02` (the families' contrasts at b = 0.2) and `named` (the needed contrasts, in order);
# `label` (a run short of its n is refused unless PARTIAL=1, then labelled partial), `contrasts_only`
# (the contrasts' markdown alone) and `em_contrasts` (--contrast per contrast of at02).
[ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
run=$(realpath "$1") other=$(realpath "$2")   # before the cd below
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
KVWB=${KVWB:-.venv/bin/kvwb}
PY=${PY:-.venv/bin/python}
# shellcheck disable=SC2086  # need: words on purpose
plan=$("$PY" docs/records/study_plan.py "$run" $need)
read -r done asked at02 named <<< "$plan"
label=""
if [ "$done" -lt "$asked" ]; then
  [ "${PARTIAL:-0}" = 1 ] || { echo "$run holds $done of its $asked examples: the families are read at n = $asked (PARTIAL=1 reads it labelled partial)" >&2; exit 1; }
  label=" (PARTIAL: $done of $asked examples)"
fi
contrasts_only() {  # the contrasts' markdown alone (with --format csv they go to stderr, the table to stdout)
  $KVWB "$@" --format csv 2>&1 >/dev/null
}
em_contrasts=()
IFS=, read -ra list <<< "$at02"
for c in "${list[@]}"; do em_contrasts+=(--contrast "$c"); done
