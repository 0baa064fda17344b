"""RESULTS.md and its log (docs/results-log/): links resolve, the log is unedited, RESULTS stays short."""
import hashlib
import re
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
RESULTS = DOCS / "RESULTS.md"
LOG = DOCS / "results-log"
MAX_LINES = 650

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
HASH_ROW = re.compile(r"^\| \[([^\]]+)\]\([^)]+\) \| `([0-9a-f]{64})` \|$", re.M)
ORDER_ROW = re.compile(r"^\| \[([^\]]+)\]\([^)]+\) \| (\d+)–(\d+) \|", re.M)
WHOLE = re.compile(r"sha256 `([0-9a-f]{64})`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a markdown text (repeats get -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, base: Path) -> list[str]:
    """The relative links of `path` (resolved from `base`) whose file or heading anchor is missing."""
    text = path.read_text(encoding="utf-8")
    problems = []
    for target in LINK.findall(CODE.sub("", FENCE.sub("", text))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, …
            continue
        file, _, anchor = target.partition("#")
        dest = (base / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{path.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            problems.append(f"{path.name}: {target} (no such heading)")
    return problems


def recorded_hashes(folder: Path) -> dict[str, str]:
    """File name -> sha256 as the log's README records it."""
    return dict(HASH_ROW.findall((folder / "README.md").read_text(encoding="utf-8")))


def check_log(folder: Path) -> list[str]:
    """What in a results-log folder differs from its README's hashes: an edited, missing or unlisted
    file. Empty when the log is as recorded."""
    recorded = recorded_hashes(folder)
    problems = []
    for name, sha in recorded.items():
        file = folder / name
        if not file.is_file():
            problems.append(f"{name}: listed but missing")
        elif hashlib.sha256(file.read_bytes()).hexdigest() != sha:
            problems.append(f"{name}: edited (sha256 differs from the README's)")
    for file in sorted(folder.glob("*.md")):
        if file.name != "README.md" and file.name not in recorded:
            problems.append(f"{file.name}: not listed in the README's hashes")
    return problems


def test_every_relative_link_in_results_and_its_log_resolves():
    problems = broken_links(RESULTS, DOCS) + broken_links(LOG / "README.md", LOG)
    for file in sorted(LOG.glob("*.md")):
        if file.name != "README.md":  # verbatim RESULTS text: its links resolve from docs/
            problems += broken_links(file, DOCS)
    assert problems == []


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#two-words) [x](a.md#three) [y](gone.md) `[z](in-code.md)`\n"
                    "```\n[w](in-fence.md)\n```\n[self](#here)\n\n## Here\n")
    assert broken_links(page, tmp_path) == ["b.md: a.md#three (no such heading)", "b.md: gone.md (no such file)"]


def test_the_log_is_unedited_since_its_hashes_were_recorded():
    recorded = recorded_hashes(LOG)
    assert sum("preregistration" in name for name in recorded) >= 17  # every dated pre-registration
    assert check_log(LOG) == []


def test_one_edited_byte_in_a_preregistration_fails_the_check(tmp_path):
    folder = tmp_path / "log"
    shutil.copytree(LOG, folder)
    assert check_log(folder) == []
    target = folder / "2026-12-02-10.4-preregistration.md"
    data = bytearray(target.read_bytes())
    data[200] = ord("x") if data[200] != ord("x") else ord("y")
    target.write_bytes(bytes(data))
    (folder / "2026-12-06-unlisted.md").write_text("a reading nobody recorded\n")
    assert check_log(folder) == ["2026-12-02-10.4-preregistration.md: edited (sha256 differs from the README's)",
                                 "2026-12-06-unlisted.md: not listed in the README's hashes"]


def test_the_log_gives_back_results_as_it_stood_before_the_rewrite():
    readme = (LOG / "README.md").read_text(encoding="utf-8")
    pieces = ORDER_ROW.findall(readme)
    assert [int(first) for _, first, _ in pieces][0] == 1
    for (_, _, last), (_, first, _) in zip(pieces, pieces[1:]):
        assert int(first) == int(last) + 1  # contiguous
    whole = b"".join((LOG / name).read_bytes() for name, _, _ in pieces)
    assert whole.count(b"\n") == int(pieces[-1][2])
    assert hashlib.sha256(whole).hexdigest() == WHOLE.search(readme).group(1)


def test_results_links_every_preregistration_and_stays_short():
    text = RESULTS.read_text(encoding="utf-8")
    unlinked = [name for name in recorded_hashes(LOG) if "preregistration" in name and f"results-log/{name}" not in text]
    assert unlinked == []
    assert len(text.splitlines()) <= MAX_LINES
