-- Each request's history: a row when it is stored and one per status change, written in the
-- transaction that stores the change. `seq` orders them across all requests (the broker-wide
-- event stream resumes from it); `at` is the transition time the lifecycle recorded.
CREATE TABLE IF NOT EXISTS request_events (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id       TEXT NOT NULL,
    request_type     TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    status           TEXT NOT NULL,
    previous_status  TEXT,
    message          TEXT,
    at               BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS request_events_by_request ON request_events (request_id, seq);
