-- Requests and machines. Portable SQL for SQLite and PostgreSQL (run through sqlx's Any
-- driver): timestamps are epoch microseconds (BIGINT), lists and provider bookkeeping are
-- JSON text, and every row carries a version for optimistic concurrency.
CREATE TABLE IF NOT EXISTS requests (
    request_id          TEXT PRIMARY KEY,
    request_type        TEXT NOT NULL,
    template_id         TEXT,
    provider_name       TEXT NOT NULL,
    provider_type       TEXT NOT NULL,
    provider_api        TEXT,
    status              TEXT NOT NULL,
    status_message      TEXT,
    requested_count     BIGINT NOT NULL,
    fulfilled_count     BIGINT NOT NULL,
    failed_count        BIGINT NOT NULL,
    machine_ids         TEXT NOT NULL,
    unknown_machines    TEXT NOT NULL,
    resource_ids        TEXT NOT NULL,
    provider_data       TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    started_at          BIGINT,
    deadline_at         BIGINT,
    completed_at        BIGINT,
    last_transition_at  BIGINT NOT NULL,
    version             BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_by_created ON requests (created_at);
CREATE INDEX IF NOT EXISTS requests_by_status ON requests (status);

CREATE TABLE IF NOT EXISTS machines (
    machine_id          TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    request_id          TEXT NOT NULL,
    return_request_id   TEXT,
    template_id         TEXT NOT NULL,
    provider_name       TEXT NOT NULL,
    provider_api        TEXT,
    resource_id         TEXT,
    uid                 TEXT,
    status              TEXT NOT NULL,
    status_reason       TEXT,
    private_ip          TEXT,
    public_ip           TEXT,
    launch_time         BIGINT,
    instance_type       TEXT,
    price_type          TEXT,
    tags                TEXT NOT NULL,
    provider_data       TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    version             BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS machines_by_request ON machines (request_id);
CREATE INDEX IF NOT EXISTS machines_by_return ON machines (return_request_id);
CREATE INDEX IF NOT EXISTS machines_by_name ON machines (name);
CREATE INDEX IF NOT EXISTS machines_by_template ON machines (template_id, status);
