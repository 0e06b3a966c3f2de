#!/usr/bin/env bash
# Refresh the lock files that tools/venv.sh installs from:
#   requirements/lock.txt     the exact release of every package the project and its test extra
#                             need (pyproject.toml's ranges, and its `build` dependency group for the
#                             editable install), for Python 3.12 on every platform (--universal:
#                             environment markers, not one machine's wheels), with the sha256 of
#                             every file of those releases;
#   requirements/no-deps.txt  requirements/no-deps.in pinned with hashes, installed without deps;
#   requirements/constraints.txt  lock.txt's pins without hashes: the constraint file of a user's own
#                             `pip install -c requirements/constraints.txt -e '.[eval]'` (README), which
#                             resolves what that user asks for at the tested releases (pip turns on
#                             hash-checking for every requirement once a constraint carries a hash,
#                             and an editable install has no file to hash, so the lock itself can't be it).
#
#   bash tools/lock.sh              re-resolve after a change of pyproject.toml's ranges, keeping
#                                   each package's locked release wherever the ranges still allow it
#   bash tools/lock.sh --upgrade    re-resolve to the newest releases the ranges allow
#
# Then run the suite on the new lock (bash tests/run.sh) and commit the lock with the change.
# `bash tests/run.sh --newest` runs the suite on the newest releases without touching the lock.
# The resolver is uv, pinned here, installed into a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.8
upgrade=()
case "${1:-}" in
  "") ;;
  --upgrade) upgrade=(--upgrade) ;;
  *) echo "tools/lock.sh: unknown argument '$1' (expected nothing or --upgrade)" >&2; exit 2 ;;
esac
PY=$(bash tools/venv.sh --python)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/uv"
"$tmp/uv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >&2
# uv keeps the releases already in an output file unless --upgrade, and writes it only on success
export UV_CUSTOM_COMPILE_COMMAND="bash tools/lock.sh${upgrade:+ --upgrade}"
"$tmp/uv/bin/uv" pip compile pyproject.toml --extra test --group build --universal --python-version 3.12 \
  --generate-hashes "${upgrade[@]}" -o requirements/lock.txt >&2
"$tmp/uv/bin/uv" pip compile requirements/no-deps.in --no-deps --universal --python-version 3.12 \
  --generate-hashes "${upgrade[@]}" -o requirements/no-deps.txt >&2
"$PY" - requirements/lock.txt requirements/constraints.txt <<'PY'
import re, sys
src, dst = sys.argv[1:]
pin = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*==[^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
lines = ["# requirements/lock.txt's releases without their hashes, made by bash tools/lock.sh: the",
         "# constraint file of pip install -c requirements/constraints.txt -e '.[eval]' (docs/install.md)"]
lines += [m[1] + (f" ; {m[2]}" if m[2] else "") for m in map(pin.match, open(src).read().splitlines()) if m]
open(dst + ".partial", "w").write("\n".join(lines) + "\n")
import os; os.replace(dst + ".partial", dst)
PY
echo "tools/lock.sh: wrote requirements/lock.txt ($(grep -c '^[a-z0-9]' requirements/lock.txt) packages)" \
  "requirements/no-deps.txt and requirements/constraints.txt" >&2
