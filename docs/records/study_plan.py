"""What an analyse-*.sh script reads of a pre-registered run, on one line: the examples it holds, the
n its command asked, its families' contrasts moved to b = 0.2 (comma-joined), then the contrasts the
script names, in order. A message and exit status 1 where the run keeps no pre-registration or its
pre-registration names none of them.

    .venv/bin/python docs/records/study_plan.py RUN A1 B3   ->  200 200 c1@0.2,c2@0.2,... A1's B3's
"""

import json
import sys
from pathlib import Path

from workbench.experiments.families import read_preregistration
from workbench.runstore import load_sweep


def main(folder: Path, needed: list[str]) -> str:
    asked = json.loads((folder / "manifest.json").read_text())["args"]["n"]
    pre = read_preregistration(folder)
    if pre is None:
        sys.exit(f"{folder} keeps no preregistration.json: not a pre-registered study")
    named = {name: c for family in pre.families.values() for name, c in family.items()}
    missing = [name for name in needed if name not in named]
    if missing:
        sys.exit(f"{folder}'s pre-registration names no {' or '.join(missing)}: the readings need {' and '.join(needed)}")
    at02 = [c.replace("@auc", "@0.2") for c in named.values()]
    return " ".join([str(len(load_sweep(folder).examples)), str(asked), ",".join(at02), *(named[n] for n in needed)])


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), sys.argv[2:]))
