#!/usr/bin/env bash
# The main job on the embedded default, no server and no configuration: builds rtsync and runs
# `rtsync sync` with a local-folder bucket. On first run the init chain installs the bundled demo database.
# State lives in $RTSYNC_HOME (default: .rtsync-demo in this checkout); run it again to sync again.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
swift build --product rtsync
bin="$(swift build --show-bin-path)/rtsync"
export RTSYNC_HOME="${RTSYNC_HOME:-$PWD/.rtsync-demo}"
"$bin" sync "$@"
"$bin" status
