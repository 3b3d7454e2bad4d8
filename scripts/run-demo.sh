#!/usr/bin/env bash
# The main job on the embedded default: no server, no configuration.
# Today: snapshot the bundled demo database into a diff in a local-folder bucket and inspect it.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${RTSYNC_HOME:-$PWD/.rtsync-demo}"
bucket="$home/bucket/demo"
mkdir -p "$bucket"
swift build --product rtsync
bin="$(swift build --show-bin-path)/rtsync"
cp Fixtures/databases/record-thing-demo.sqlite "$home/demo-copy.sqlite"
file="$("$bin" snapshot --db "$home/demo-copy.sqlite" --out "$bucket" --user demo)"
"$bin" diff inspect "$file"
