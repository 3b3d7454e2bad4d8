-- Routine/records: removing a routine keeps its records and sets their routine_id to NULL.
PRAGMA foreign_keys = ON;
CREATE TABLE routine (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE records (
    id TEXT PRIMARY KEY,
    routine_id INTEGER REFERENCES routine(id) ON DELETE SET NULL,
    value REAL,
    note TEXT
);
INSERT INTO routine VALUES (1, 'stretching'), (2, 'reading');
INSERT INTO records VALUES
 ('r1', 1, 10.0, 'ten minutes'),
 ('r2', 1, 12.5, NULL),
 ('r3', 2, 30.0, 'chapter 3');
