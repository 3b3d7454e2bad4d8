-- A Record-Thing-style app database: the bundled demo asset and the fixture for conflict tests.
-- Built by build.sh into record-thing-demo.sqlite (WAL mode, like the real app database).
PRAGMA journal_mode = WAL;
CREATE TABLE accounts (
    account_id TEXT PRIMARY KEY, -- KSUID
    name TEXT,
    username TEXT UNIQUE,
    email TEXT UNIQUE,
    region TEXT,
    is_active BOOLEAN DEFAULT 1
);
CREATE TABLE owners (
    account_id TEXT PRIMARY KEY -- the account that owns this database's demo data
);
CREATE TABLE things (
    id TEXT NOT NULL DEFAULT '',          -- KSUID
    account_id TEXT NOT NULL DEFAULT '',
    brand TEXT NULL DEFAULT NULL,
    model TEXT NULL DEFAULT NULL,
    color TEXT NULL DEFAULT NULL,
    title TEXT NULL DEFAULT NULL,
    description TEXT NULL DEFAULT NULL,
    created_at FLOAT NULL DEFAULT NULL,
    updated_at FLOAT NULL DEFAULT NULL,
    PRIMARY KEY (account_id, id)
);
CREATE TABLE evidence (
    id TEXT PRIMARY KEY,                   -- KSUID
    thing_account_id TEXT,
    thing_id TEXT,
    request_id INTEGER,
    created_at FLOAT NULL DEFAULT NULL,
    data TEXT,
    local_file TEXT
);
CREATE TABLE requests (
    id INTEGER PRIMARY KEY,
    account_id TEXT NOT NULL DEFAULT '',
    url TEXT UNIQUE NOT NULL,
    type TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at FLOAT NULL DEFAULT NULL   -- some rows hold ISO-8601 text, as in the real app
);
CREATE TABLE translations (
    lang VARCHAR NOT NULL,
    key VARCHAR NOT NULL,
    value TEXT NOT NULL,
    context VARCHAR,
    PRIMARY KEY (lang, key)
);

INSERT INTO accounts VALUES ('2siEySuKO1wK4XiJHWQ0YxhLxd2', 'Demo User', 'demo', 'demo@example.com', 'EU', 1);
INSERT INTO owners VALUES ('2siEySuKO1wK4XiJHWQ0YxhLxd2');
INSERT INTO things VALUES
 ('2siF0MQxlcAmWuBgrPsNUQrOdcv', '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'Sony', 'WH-1000XM4', 'black', 'Headphones', 'Noise cancelling', 1713000000.5, 1713000000.5),
 ('2siF0NDzx8GWL1tBd6vx9shlVBj', '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'Apple', 'A2337', 'silver', 'Laptop', 'MacBook Air M1', 1713000100.0, 1713000100.0),
 ('2siF0O1Rp2YMPkbsFv4eDCnTMdG', '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'IKEA', 'POÄNG', 'birch', 'Armchair', 'Chair — bentwood', 1713000200.0, NULL);
INSERT INTO evidence VALUES
 ('2siF1Ay0wE4wGrmKDcMIwgWD9t4', '2siEySuKO1wK4XiJHWQ0YxhLxd2', '2siF0MQxlcAmWuBgrPsNUQrOdcv', 1, 1713000001.0, '{"kind":"receipt"}', '/images/receipt1.jpg'),
 ('2siF1BpVhS4Ct1wGnNBVLyqLmCg', '2siEySuKO1wK4XiJHWQ0YxhLxd2', '2siF0NDzx8GWL1tBd6vx9shlVBj', 2, 1713000101.0, '{"kind":"photo"}', '/images/laptop.png');
INSERT INTO requests VALUES
 (1, '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'https://example.com/r/1', 'lookup', 'completed', 1713000001.0),
 (2, '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'https://example.com/r/2', 'lookup', 'pending', '2024-04-13T09:21:41Z');
INSERT INTO translations VALUES
 ('en', 'ui.things', 'Things', 'ui'), ('de', 'ui.things', 'Dinge', 'ui'), ('ja', 'ui.things', '物', 'ui'),
 ('en', 'ui.evidence', 'Evidence', 'ui'), ('de', 'ui.evidence', 'Nachweis', 'ui');
