-- Routines and logs: logs are append-only (never updated or deleted by another device);
-- routines may only be changed by their owner (owner_id).
CREATE TABLE routines (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    name TEXT NOT NULL,
    schedule TEXT,
    enabled INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE logs (
    id TEXT PRIMARY KEY,
    routine_id TEXT,
    author_id TEXT NOT NULL,
    at TEXT NOT NULL,
    message TEXT
);
INSERT INTO routines VALUES
 ('2siG0aaaaaaaaaaaaaaaaaaaaaa', 'userA', 'Morning run', '0 7 * * *', 1),
 ('2siG0bbbbbbbbbbbbbbbbbbbbbb', 'userB', 'Water plants', '0 18 * * 1,4', 1);
INSERT INTO logs VALUES
 ('2siG1aaaaaaaaaaaaaaaaaaaaaa', '2siG0aaaaaaaaaaaaaaaaaaaaaa', 'userA', '2025-01-01T07:00:00Z', 'ran 5 km'),
 ('2siG1bbbbbbbbbbbbbbbbbbbbbb', '2siG0bbbbbbbbbbbbbbbbbbbbbb', 'userB', '2025-01-01T18:00:00Z', 'watered');
