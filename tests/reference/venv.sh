#!/usr/bin/env bash
# Create (or reuse) docqa's reference-tools virtualenv at .cache/venv and print its python.
#
# What: a venv with the pinned packages of tests/reference/requirements.txt (cmake, ninja, gguf, jinja2);
# reinstalls only when requirements.txt changed. Needs python3 with pip and access to the package index.
# Run:   PY="$(tests/reference/venv.sh)"; "$PY" tests/reference/prompts_golden.py
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/../../.cache/venv"
STAMP="$VENV/.requirements"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV" >&2
if ! cmp -s "$HERE/requirements.txt" "$STAMP"; then
  "$VENV/bin/python" -m pip install --quiet -r "$HERE/requirements.txt" >&2
  cp "$HERE/requirements.txt" "$STAMP"
fi
echo "$(cd "$VENV" && pwd)/bin/python"
