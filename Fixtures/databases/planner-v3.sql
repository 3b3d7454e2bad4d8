-- Version 3: routines.notes is dropped, requests' key becomes INTEGER and it gains a NOT NULL column without a
-- default, tags gains a column.
PRAGMA journal_mode = WAL;
CREATE TABLE routines(id INTEGER PRIMARY KEY, name TEXT NOT NULL, color TEXT);
CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER REFERENCES routines(id) ON DELETE SET NULL, reps INTEGER, load_kg REAL);
CREATE TABLE requests(id INTEGER PRIMARY KEY, url TEXT, status TEXT, type TEXT NOT NULL DEFAULT 'image', priority INTEGER NOT NULL);
CREATE TABLE tags(id TEXT PRIMARY KEY NOT NULL, label TEXT NOT NULL, weight REAL);
INSERT INTO routines VALUES (1, 'squat', NULL), (2, 'bench', NULL);
INSERT INTO records VALUES ('r1', 1, 5, 100.0), ('r2', 2, 8, 60.5);
INSERT INTO requests VALUES (11, 'https://example.com/a', 'new', 'image', 1);
