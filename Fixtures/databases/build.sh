#!/usr/bin/env bash
# Rebuilds every fixture database from its .sql file, reproducibly (same SQL, same content).
set -euo pipefail
cd "$(dirname "$0")"
for sql in *.sql; do
  db="${sql%.sql}.sqlite"
  rm -f "$db" "$db-wal" "$db-shm"
  sqlite3 "$db" < "$sql" > /dev/null
  # Fold the WAL into the main file so the fixture is one self-contained file.
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null
  rm -f "$db-wal" "$db-shm"
  echo "built $db"
done
# The demo database is also the bundled asset of the DemoAsset target (its own folder: see Package.swift).
cp record-thing-demo.sqlite ../../Sources/DemoAsset/record-thing-demo.sqlite
echo "copied record-thing-demo.sqlite to Sources/DemoAsset"
