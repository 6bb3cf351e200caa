#!/bin/sh
# The mixed-corpus evaluation (docs/evaluation.md, issue 23): the demo question sets against
# the demo corpus alone, then against the demo corpus plus four Debian HTML doc sets (and,
# with EVAL_MIXED_COPIES=N, N more copies of those sets under other folders), the figures
# side by side. Run by `make eval-mixed`; every database is the script's own.
#
#   EVAL_DATABASE_URL        demo alone (default: make eval's eval-db.sqlite3)
#   EVAL_MIXED_DATABASE_URL  the mixed corpus (default: eval-mixed-db.sqlite3)
#   EVAL_MIXED_COPIES        extra copies of the doc sets (default 0)
#   EVAL_MIXED_RUNS          where the runs are saved (default: eval-mixed-runs)
#   EVAL_ARGS                more options for both evaluate runs (--misses, ...)
set -eu
cd "$(dirname "$0")/.."
PY=.venv/bin/python
HERE=$(pwd)
DEMO_DB=${EVAL_DATABASE_URL:-sqlite:///$HERE/eval-db.sqlite3}
MIXED_DB=${EVAL_MIXED_DATABASE_URL:-sqlite:///$HERE/eval-mixed-db.sqlite3}
COPIES=${EVAL_MIXED_COPIES:-0}
PACKAGES="python-django-doc postgresql-doc-15 python-scipy-doc python-pandas-doc"
SETS="eval/python-docs.dev.jsonl eval/python-docs.test.jsonl eval/handbook.dev.jsonl
  eval/handbook.test.jsonl eval/off-topic.dev.jsonl eval/off-topic.test.jsonl"
RUNS=${EVAL_MIXED_RUNS:-eval-mixed-runs}
export DJANGO_DEBUG=1
mkdir -p "$RUNS"

# The doc sets: installed when missing (as root, or with sudo), else left out in one line.
missing=""
for package in $PACKAGES; do
  [ -d "/usr/share/doc/$package/html" ] || missing="$missing $package"
done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if ! { $sudo apt-get install -y -q $missing; } > "$RUNS/apt.log" 2>&1; then
    echo "eval-mixed: cannot install$missing (apt-get failed, see $RUNS/apt.log): the mixed corpus is without them."
  fi
fi
folders=""
for package in $PACKAGES; do
  [ -d "/usr/share/doc/$package/html" ] && folders="$folders /usr/share/doc/$package/html"
done
if [ -z "$folders" ]; then
  echo "eval-mixed: no Debian doc set is installed; nothing to mix, skipped."
  exit 0
fi

# Copies under other folders: hard links (no extra space), each file a document of its own
# (a source key is the resolved path). Only N copies are kept.
copies=""
i=1
while [ "$i" -le "$COPIES" ]; do
  copy="eval-mixed-copies/copy$i"
  if [ ! -d "$copy" ]; then
    mkdir -p "$copy"
    for folder in $folders; do
      name=$(basename "$(dirname "$folder")")
      cp -rlL "$folder" "$copy/$name" 2>/dev/null || cp -rL "$folder" "$copy/$name"
    done
  fi
  copies="$copies $copy"
  i=$((i + 1))
done

echo "== demo corpus alone ($DEMO_DB)"
DATABASE_URL=$DEMO_DB $PY manage.py migrate --noinput -v 0
DATABASE_URL=$DEMO_DB $PY manage.py ingest --python-docs eval/corpora/handbook --no-progress
# shellcheck disable=SC2086
DATABASE_URL=$DEMO_DB $PY manage.py evaluate $SETS --label demo --save "$RUNS/demo.json" ${EVAL_ARGS:-}

label=mixed
[ "$COPIES" -gt 0 ] && label="mixed+$COPIES"
echo "== demo corpus +$folders$copies ($MIXED_DB)"
DATABASE_URL=$MIXED_DB $PY manage.py migrate --noinput -v 0
# shellcheck disable=SC2086
DATABASE_URL=$MIXED_DB $PY manage.py ingest --python-docs eval/corpora/handbook $folders $copies --no-progress
# shellcheck disable=SC2086
DATABASE_URL=$MIXED_DB $PY manage.py evaluate $SETS --label "$label" --save "$RUNS/$label.json" \
  --compare "$RUNS/demo.json" ${EVAL_ARGS:-}
