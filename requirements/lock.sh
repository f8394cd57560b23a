#!/usr/bin/env bash
# Regenerate requirements/ci.txt: the exact versions CI installs (a pip constraints file).
# Users keep the ranges of pyproject.toml; CI pins them so that a new release of numpy,
# scipy or anything else cannot change results or turn the suite red overnight.
# Run from the repository root: bash requirements/lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
"$venv/bin/python" -m pip install --quiet torch==2.13.0
"$venv/bin/python" -m pip install --quiet -e ".[test,calibrate]"
{
    echo "# Exact versions CI installs (pip constraints; regenerate: bash requirements/lock.sh)."
    echo "# Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), generated $(date -u +%Y-%m-%d)."
    "$venv/bin/python" -m pip freeze --exclude-editable \
        | grep -v -i '^clustersim' | sed -E 's/^torch==([0-9.]+)\+cpu$/torch==\1/'
} > requirements/ci.txt
rm -rf "$(dirname "$venv")"
echo "wrote requirements/ci.txt ($(grep -vc '^#' requirements/ci.txt) packages)"
