#!/usr/bin/env bash
# Installs what the test suite needs when it is missing, then runs the whole suite (`swift test`).
#   system: libsqlite3-dev + pkg-config (the SQLite library rtsync links), sqlite3 (the shell, used by tests)
#   python: moto[server] (the loopback S3 server), awscli (interoperability tests)
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -e /usr/include/sqlite3.h ] || pkg-config --exists sqlite3 2>/dev/null || missing+=(libsqlite3-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  if command -v apt-get >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  elif command -v brew >/dev/null; then
    brew install sqlite pkg-config
  else
    echo "error: cannot install ${missing[*]}: no apt-get or brew; install them and re-run" >&2
    exit 1
  fi
fi

py=python3
command -v "$py" >/dev/null || { echo "error: python3 is needed for the loopback S3 server (moto)" >&2; exit 1; }
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@" || "$py" -m pip install --quiet --user --break-system-packages "$@"; }
command -v moto_server >/dev/null || { echo "installing moto[server]"; pip_install 'moto[server]'; }
command -v aws >/dev/null || { echo "installing awscli"; pip_install awscli; }
# pip --user puts scripts here; make sure the tests can find them.
export PATH="$PATH:$HOME/.local/bin"

swift build --build-tests
swift test --skip-build "$@"
