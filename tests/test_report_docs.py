"""docs/report-2gpu.md and docs/report-4gpu.md are what this code prints for the stores beside them:
the published reports are regenerated, never edited by hand, from runs on two and four GPUs
(docs/data/report-NAME.jsonl)."""

from pathlib import Path

import pytest

from conftest import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name", ["report-2gpu", "report-4gpu"])
def test_the_published_report_is_what_the_code_prints_for_its_store(tmp_path, name):
    db = tmp_path / "r.db"
    assert cli("import", DOCS / "data" / f"{name}.jsonl", "--db", db).returncode == 0
    out = tmp_path / "r.md"
    proc = cli("report", "--with-references", "--format", "md", "--db", db, "-o", out)
    assert proc.returncode == 0, proc.stderr
    published = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    body = published[published.index("\n## GPUs\n") + 1:]  # after the page's own introduction
    assert body == out.read_text(encoding="utf-8"), f"regenerate docs/{name}.md (its first lines say how)"
    widths = [line.count("|") - 1 for line in body.splitlines() if line.startswith("|---")]
    assert widths and max(widths) <= 10  # a reader's table, not a spreadsheet
