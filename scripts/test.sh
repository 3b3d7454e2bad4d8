#!/usr/bin/env bash
# Installs what the test suite needs when it is missing, then runs the whole suite (`swift test`).
#   system (scripts/setup.sh): libsqlite3-dev + pkg-config, sqlite3
#   python: moto[server] (the loopback S3 server), awscli (interoperability tests)
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

py=python3
command -v "$py" >/dev/null || { echo "error: python3 is needed for the loopback S3 server (moto)" >&2; exit 1; }
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@" || "$py" -m pip install --quiet --user --break-system-packages "$@"; }
command -v moto_server >/dev/null || { echo "installing moto[server]"; pip_install 'moto[server]'; }
command -v aws >/dev/null || { echo "installing awscli"; pip_install awscli; }
# pip --user puts scripts here; make sure the tests can find them.
export PATH="$PATH:$HOME/.local/bin"

swift build --build-tests
swift test --skip-build "$@"
