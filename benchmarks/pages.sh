#!/usr/bin/env bash
# Regenerate the published report pages from their stores, after any change to the report:
#
#   bash benchmarks/pages.sh            # every docs/report-NAME.md (and .html) from docs/data/report-NAME.jsonl
#   bash benchmarks/pages.sh 2gpu       # one of them
#
# Each store is imported into a fresh SQLite store and printed by `dlbench report --with-references`,
# as tests/test_report_docs.py checks. A page's own introduction (everything down to the line
# "<!-- Below this line: ... -->", which says which machine ran what) is kept; the rest of the page and
# the whole HTML page are replaced.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$HERE/src"
PY=${PYTHON:-python3}
DOCS=$HERE/docs
MARK='<!-- Below this line: what the code prints for the store (bash benchmarks/pages.sh writes it). -->'
names=("$@")
if [ ${#names[@]} = 0 ]; then
  for store in "$DOCS"/data/report-*.jsonl; do names+=("$(basename "$store" .jsonl | sed 's/^report-//')"); done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
quiet() { "$@" > /dev/null 2> "$work/err" || { cat "$work/err" >&2; exit 1; }; }  # its messages only if it fails
for name in "${names[@]}"; do
  store=$DOCS/data/report-$name.jsonl page=$DOCS/report-$name.md
  [ -e "$store" ] || { echo "no store $store" >&2; exit 2; }
  [ -e "$page" ] || { echo "no page $page: write its introduction and the line '$MARK' first" >&2; exit 2; }
  db=$work/$name.db
  quiet "$PY" -m dlbench import "$store" --db "$db"
  quiet "$PY" -m dlbench report --with-references --format md --db "$db" -o "$work/$name.md"
  intro=$(grep -n -m1 -F "$MARK" "$page" | cut -d: -f1)
  [ -n "$intro" ] || { echo "$page has no line '$MARK' to keep its introduction above" >&2; exit 2; }
  { head -n "$intro" "$page"; cat "$work/$name.md"; } > "$work/page.md"
  cat "$work/page.md" > "$page"
  quiet "$PY" -m dlbench report --with-references --format html --db "$db" -o "$DOCS/report-$name.html"
  echo "wrote docs/report-$name.md and docs/report-$name.html"
done
