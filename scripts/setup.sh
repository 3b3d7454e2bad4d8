#!/usr/bin/env bash
# Installs the system packages rtsync builds against, when missing:
# libsqlite3-dev + pkg-config (the SQLite library rtsync links), zlib1g-dev (zlib, for diffs in transit) and sqlite3 (the shell, used by tests and docs).
set -euo pipefail
missing=()
[ -e /usr/include/sqlite3.h ] || pkg-config --exists sqlite3 2>/dev/null || missing+=(libsqlite3-dev)
[ -e /usr/include/zlib.h ] || pkg-config --exists zlib 2>/dev/null || missing+=(zlib1g-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing system packages: ${missing[*]}"
if command -v apt-get >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
elif command -v brew >/dev/null; then
  brew install sqlite pkg-config zlib
else
  echo "error: cannot install ${missing[*]}: no apt-get or brew" >&2
  echo "hint: install them with your package manager and re-run" >&2
  exit 1
fi
