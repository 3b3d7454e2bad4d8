-- A planner app's schema, version 1 of 3 (the migration chain of the schema-evolution tests).
PRAGMA journal_mode = WAL;
CREATE TABLE routines(id INTEGER PRIMARY KEY, name TEXT NOT NULL, notes TEXT);
CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER REFERENCES routines(id) ON DELETE SET NULL, reps INTEGER, weight REAL);
CREATE TABLE requests(id TEXT PRIMARY KEY NOT NULL, url TEXT, status TEXT);
INSERT INTO routines VALUES (1, 'squat', 'deep'), (2, 'bench', NULL);
INSERT INTO records VALUES ('r1', 1, 5, 100.0), ('r2', 2, 8, 60.5);
INSERT INTO requests VALUES ('11', 'https://example.com/a', 'new');
