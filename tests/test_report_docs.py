"""docs/report-2gpu.md is what this code prints for the store beside it: the published report is
regenerated, never edited by hand, from runs on two GPUs (docs/data/report-2gpu.jsonl)."""

from pathlib import Path

from conftest import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_two_gpu_report_is_what_the_code_prints_for_its_store(tmp_path):
    db = tmp_path / "r.db"
    assert cli("import", DOCS / "data" / "report-2gpu.jsonl", "--db", db).returncode == 0
    out = tmp_path / "r.md"
    proc = cli("report", "--with-references", "--format", "md", "--db", db, "-o", out)
    assert proc.returncode == 0, proc.stderr
    published = (DOCS / "report-2gpu.md").read_text(encoding="utf-8")
    body = published[published.index("\n## GPUs\n") + 1:]  # after the page's own introduction
    assert body == out.read_text(encoding="utf-8"), "regenerate docs/report-2gpu.md (its first lines say how)"
    widths = [line.count("|") - 1 for line in body.splitlines() if line.startswith("|---")]
    assert widths and max(widths) <= 10  # a reader's table, not a spreadsheet
