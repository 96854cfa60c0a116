"""Every published report page, docs/report-NAME.md (and its .html where it exists), is what this code
prints for the store beside it, docs/data/report-NAME.jsonl: the pages are regenerated, never edited
by hand (`bash benchmarks/pages.sh`), below the introduction each page writes by hand (which machine
ran what). A page without a store cannot be checked, so there is none."""

import difflib
import re
import subprocess
from pathlib import Path

import pytest

from conftest import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARK = "<!-- Below this line: what the code prints for the store (bash benchmarks/pages.sh writes it). -->\n"
PAGES = sorted(p.stem.removeprefix("report-") for p in DOCS.glob("report-*.md"))
GENERATED = re.compile(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC\.")  # the one line that must vary


def _differs(page: str, published: str, printed: str) -> str:
    """Which page, its first different line, and the command that makes it current."""
    lines = list(difflib.unified_diff(published.splitlines(), printed.splitlines(), f"docs/{page}",
                                      "what the code prints", n=0, lineterm=""))
    return (f"docs/{page} is not what the code prints for its store; regenerate it: "
            f"bash benchmarks/pages.sh {page.split('.')[0].removeprefix('report-')}\n" + "\n".join(lines[:12]))


@pytest.fixture(scope="module", params=PAGES)
def printed(request, tmp_path_factory):
    name = request.param
    store = DOCS / "data" / f"report-{name}.jsonl"
    assert store.exists(), f"docs/report-{name}.md has no store {store.relative_to(ROOT)}: keep one or fold the page"
    work = tmp_path_factory.mktemp(name)
    db = work / "r.db"
    assert cli("import", store, "--db", db).returncode == 0
    out = {}
    for fmt in ("md", "html"):
        proc = cli("report", "--with-references", "--format", fmt, "--db", db, "-o", work / f"r.{fmt}")
        assert proc.returncode == 0, proc.stderr
        out[fmt] = (work / f"r.{fmt}").read_text(encoding="utf-8")
    return name, out


def test_every_page_has_a_store_and_its_introduction_ends_where_the_printed_part_starts():
    assert PAGES and "h200" not in PAGES  # the 1-GPU H200 page had no store: the 2-GPU page has its rows
    for name in PAGES:
        assert (DOCS / "data" / f"report-{name}.jsonl").exists(), name
        assert (DOCS / f"report-{name}.md").read_text(encoding="utf-8").count(MARK) == 1, name


def test_the_published_markdown_is_what_the_code_prints_for_its_store(printed):
    name, out = printed
    published = (DOCS / f"report-{name}.md").read_text(encoding="utf-8")
    body = published[published.index(MARK) + len(MARK):]
    assert body == out["md"], _differs(f"report-{name}.md", body, out["md"])
    widths = [line.count("|") - 1 for line in body.splitlines() if line.startswith("|---")]
    assert widths and max(widths) <= 10  # a reader's table, not a spreadsheet


def test_the_published_html_is_what_the_code_prints_for_its_store(printed):
    name, out = printed
    page = DOCS / f"report-{name}.html"
    if not page.exists():
        pytest.skip(f"docs/report-{name}.md has no HTML page")
    published = GENERATED.sub("Generated -.", page.read_text(encoding="utf-8"))
    html = GENERATED.sub("Generated -.", out["html"])
    assert published == html, _differs(page.name, published, html)


def test_the_pages_script_writes_what_the_test_expects(tmp_path):
    """benchmarks/pages.sh on a copy of the docs: the page it writes passes the comparison above,
    and its introduction is kept line for line."""
    docs = tmp_path / "docs"
    (docs / "data").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "pages.sh").write_bytes((ROOT / "benchmarks" / "pages.sh").read_bytes())
    (tmp_path / "src").symlink_to(ROOT / "src")
    name = "4gpu"
    (docs / "data" / f"report-{name}.jsonl").write_bytes((DOCS / "data" / f"report-{name}.jsonl").read_bytes())
    intro = "# A page\n\nIts introduction.\n\n" + MARK
    (docs / f"report-{name}.md").write_text(intro + "stale\n", encoding="utf-8")
    proc = subprocess.run(["bash", str(tmp_path / "benchmarks" / "pages.sh")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote docs/report-{name}.md and docs/report-{name}.html"
    written = (docs / f"report-{name}.md").read_text(encoding="utf-8")
    assert written.startswith(intro) and written[len(intro):] == (DOCS / f"report-{name}.md").read_text(
        encoding="utf-8").split(MARK)[1]
    assert (docs / f"report-{name}.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_pages_script_names_a_page_without_a_store(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "docs" / "data").mkdir(parents=True)
    (tmp_path / "benchmarks" / "pages.sh").write_bytes((ROOT / "benchmarks" / "pages.sh").read_bytes())
    proc = subprocess.run(["bash", str(tmp_path / "benchmarks" / "pages.sh"), "h200"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == f"no store {tmp_path}/docs/data/report-h200.jsonl"
