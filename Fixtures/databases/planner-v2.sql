-- Version 2: routines gains a column, records.weight is renamed, requests gains a NOT NULL column with a default,
-- and a new table appears.
PRAGMA journal_mode = WAL;
CREATE TABLE routines(id INTEGER PRIMARY KEY, name TEXT NOT NULL, notes TEXT, color TEXT);
CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER REFERENCES routines(id) ON DELETE SET NULL, reps INTEGER, load_kg REAL);
CREATE TABLE requests(id TEXT PRIMARY KEY NOT NULL, url TEXT, status TEXT, type TEXT NOT NULL DEFAULT 'image');
CREATE TABLE tags(id TEXT PRIMARY KEY NOT NULL, label TEXT NOT NULL);
INSERT INTO routines VALUES (1, 'squat', 'deep', NULL), (2, 'bench', NULL, NULL);
INSERT INTO records VALUES ('r1', 1, 5, 100.0), ('r2', 2, 8, 60.5);
INSERT INTO requests VALUES ('11', 'https://example.com/a', 'new', 'image');
