//! Request rows, written together with the machines they touch.

use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::kept::KeptCache;
use orb_core::machine::Machine;
use orb_core::request::{Request, RequestStatus, RequestType};
use sqlx::any::Any;
use sqlx::{AssertSqlSafe, Transaction};

use crate::codec::{ColumnSource, RowReader, micros, opt_micros, to_json};
use crate::events;
use crate::machines::write_machines;
use crate::{Result, Store, StoreError};

pub(crate) const REQUEST_COLUMNS: &str = "request_id, request_type, template_id, provider_name, provider_type, \
    provider_api, status, status_message, requested_count, fulfilled_count, failed_count, \
    machine_ids, unknown_machines, resource_ids, provider_data, created_at, started_at, \
    deadline_at, completed_at, last_transition_at, version";

/// How many names (pods, machines) the requests kept by [`RequestCache`] may list in all;
/// beyond it the least recently used are dropped.
const REQUEST_CACHE_NAMES: usize = 20_000;

/// Requests as this process last read them. A status read of a 5,000-pod acquire decoded its
/// row every time, two lists of 5,000 pod names among it (a sixth of the work of a status
/// read through `orb serve`), and the row rarely changes once the acquire is done. A kept
/// request is handed out only while nothing at all was committed since it was read
/// ([`Store::commit_token`], SQLite only: on PostgreSQL every read decodes the row); its name
/// lists are shared with the copies handed out.
pub(crate) type RequestCache = KeptCache<Request, REQUEST_CACHE_NAMES>;

/// Which requests to list; empty/`None` fields match everything. Newest first.
#[derive(Debug, Clone, Default)]
pub struct RequestFilter {
    pub request_type: Option<RequestType>,
    pub statuses: Vec<RequestStatus>,
    pub template_id: Option<String>,
    pub limit: Option<u32>,
}

pub(crate) fn decode<R: ColumnSource + ?Sized>(row: &R) -> Result<Request> {
    let r = RowReader::new(row, "request", "request_id");
    let id = r.text("request_id")?;
    Ok(Request {
        request_id: RequestId::parse(&id).map_err(|e| StoreError::Corrupt {
            entity: "request",
            id: id.clone(),
            message: e.to_string(),
        })?,
        request_type: r.parsed("request_type")?,
        template_id: r.opt_text("template_id")?,
        provider_name: r.text("provider_name")?,
        provider_type: r.text("provider_type")?,
        provider_api: r.opt_parsed("provider_api")?,
        status: r.parsed("status")?,
        status_message: r.opt_text("status_message")?,
        requested_count: r.count("requested_count")?,
        fulfilled_count: r.count("fulfilled_count")?,
        failed_count: r.count("failed_count")?,
        machine_ids: r.json("machine_ids")?,
        unknown_machines: r.json("unknown_machines")?,
        resource_ids: r.json("resource_ids")?,
        provider_data: r.json("provider_data")?,
        created_at: r.time("created_at")?,
        started_at: r.opt_time("started_at")?,
        deadline_at: r.opt_time("deadline_at")?,
        completed_at: r.opt_time("completed_at")?,
        last_transition_at: r.time("last_transition_at")?,
        version: r.int("version")?,
    })
}

pub(crate) async fn insert_row(tx: &mut Transaction<'_, Any>, request: &Request) -> Result<()> {
    let sql = format!(
        "INSERT INTO requests ({REQUEST_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)"
    );
    sqlx::query(AssertSqlSafe(sql))
        .bind(request.request_id.to_string())
        .bind(request.request_type.as_str())
        .bind(request.template_id.clone())
        .bind(request.provider_name.clone())
        .bind(request.provider_type.clone())
        .bind(request.provider_api.map(ProviderApi::as_str))
        .bind(request.status.as_str())
        .bind(request.status_message.clone())
        .bind(i64::from(request.requested_count))
        .bind(i64::from(request.fulfilled_count))
        .bind(i64::from(request.failed_count))
        .bind(to_json(&request.machine_ids))
        .bind(to_json(&request.unknown_machines))
        .bind(to_json(&request.resource_ids))
        .bind(to_json(&request.provider_data))
        .bind(micros(request.created_at))
        .bind(opt_micros(request.started_at))
        .bind(opt_micros(request.deadline_at))
        .bind(opt_micros(request.completed_at))
        .bind(micros(request.last_transition_at))
        .bind(request.version + 1)
        .execute(&mut **tx)
        .await
        .map_err(StoreError::on_insert(
            "request",
            request.request_id.to_string(),
            "insert a request",
        ))?;
    // Every way in (a plain insert, a limited acquire) starts the request's history.
    events::record_created(tx, request).await
}

async fn update_row(tx: &mut Transaction<'_, Any>, request: &Request) -> Result<()> {
    let result = sqlx::query(
        "UPDATE requests SET template_id = $1, provider_api = $2, status = $3, status_message = $4, \
         requested_count = $5, fulfilled_count = $6, failed_count = $7, machine_ids = $8, \
         unknown_machines = $9, resource_ids = $10, provider_data = $11, started_at = $12, \
         deadline_at = $13, completed_at = $14, last_transition_at = $15, version = version + 1 \
         WHERE request_id = $16 AND version = $17",
    )
    .bind(request.template_id.clone())
    .bind(request.provider_api.map(ProviderApi::as_str))
    .bind(request.status.as_str())
    .bind(request.status_message.clone())
    .bind(i64::from(request.requested_count))
    .bind(i64::from(request.fulfilled_count))
    .bind(i64::from(request.failed_count))
    .bind(to_json(&request.machine_ids))
    .bind(to_json(&request.unknown_machines))
    .bind(to_json(&request.resource_ids))
    .bind(to_json(&request.provider_data))
    .bind(opt_micros(request.started_at))
    .bind(opt_micros(request.deadline_at))
    .bind(opt_micros(request.completed_at))
    .bind(micros(request.last_transition_at))
    .bind(request.request_id.to_string())
    .bind(request.version)
    .execute(&mut **tx)
    .await
    .map_err(StoreError::db("update a request"))?;
    StoreError::expect_updated(
        result.rows_affected(),
        "request",
        request.request_id.to_string(),
        request.version,
    )
}

/// Whether [`Store::write_request`] creates the request row or updates it.
#[derive(Clone, Copy)]
enum RowWrite {
    Insert,
    Update,
}

impl Store {
    /// Stores a new request (its `version` must be 0) and writes `machines` in the same
    /// transaction: new machines (version 0) are inserted, known ones updated if unchanged
    /// since read. On success the versions in the arguments are bumped.
    pub async fn insert_request(
        &self,
        request: &mut Request,
        machines: &mut [Machine],
    ) -> Result<()> {
        self.write_request(request, machines, RowWrite::Insert)
            .await
    }

    /// Writes a changed request and the machines it touched, atomically, failing with
    /// [`StoreError::Conflict`] (and writing nothing) if any of them changed since read.
    pub async fn update_request(
        &self,
        request: &mut Request,
        machines: &mut [Machine],
    ) -> Result<()> {
        self.write_request(request, machines, RowWrite::Update)
            .await
    }

    /// The request row and its machines in one transaction; versions bumped only on commit.
    async fn write_request(
        &self,
        request: &mut Request,
        machines: &mut [Machine],
        row: RowWrite,
    ) -> Result<()> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("begin a transaction"))?;
        match row {
            RowWrite::Insert => insert_row(&mut tx, request).await?,
            RowWrite::Update => {
                events::record_change(&mut tx, request).await?;
                update_row(&mut tx, request).await?;
            }
        }
        write_machines(&mut tx, machines).await?;
        tx.commit().await.map_err(StoreError::db(match row {
            RowWrite::Insert => "commit a new request",
            RowWrite::Update => "commit a request update",
        }))?;
        request.version += 1;
        machines.iter_mut().for_each(|m| m.version += 1);
        Ok(())
    }

    pub async fn get_request(&self, request_id: &RequestId) -> Result<Option<Request>> {
        let key = request_id.to_string();
        // As for machine lists: with nothing kept (always so in a one-call process), the token
        // would not help. No version check either: a row edited by hand keeps its version, and
        // must still be read (and reported if orb cannot read it).
        let token = if self.requests.holds(&key) {
            let token = self.commit_token().await;
            if let Some(kept) = token
                .as_deref()
                .and_then(|token| self.requests.get_unchanged(&key, token))
            {
                return Ok(Some(kept));
            }
            token
        } else {
            None
        };
        let sql = format!("SELECT {REQUEST_COLUMNS} FROM requests WHERE request_id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(&key)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("read a request"))?;
        let Some(request) = row.as_ref().map(decode).transpose()? else {
            self.requests.forget(&key);
            return Ok(None);
        };
        if self.backend == crate::Backend::Sqlite {
            self.requests.put(key, request.clone(), token);
        }
        Ok(Some(request))
    }

    /// How many stored requests are in each status (statuses with none are left out): one
    /// aggregate, for `/metrics`, which is scraped often and must not decode every request.
    pub async fn count_requests_by_status(&self) -> Result<Vec<(RequestStatus, i64)>> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM requests GROUP BY status")
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::db("count requests by status"))?;
        rows.into_iter()
            .map(|(status, count)| {
                let parsed = status.parse().map_err(|message| StoreError::Corrupt {
                    entity: "request status",
                    id: status.clone(),
                    message,
                })?;
                Ok((parsed, count))
            })
            .collect()
    }

    pub async fn list_requests(&self, filter: &RequestFilter) -> Result<Vec<Request>> {
        let mut sql = format!("SELECT {REQUEST_COLUMNS} FROM requests WHERE 1 = 1");
        let mut binds: Vec<String> = Vec::new();
        if let Some(kind) = filter.request_type {
            binds.push(kind.as_str().to_string());
            sql.push_str(&format!(" AND request_type = ${}", binds.len()));
        }
        if let Some(template) = &filter.template_id {
            binds.push(template.clone());
            sql.push_str(&format!(" AND template_id = ${}", binds.len()));
        }
        if !filter.statuses.is_empty() {
            let mut marks = Vec::new();
            for status in &filter.statuses {
                binds.push(status.as_str().to_string());
                marks.push(format!("${}", binds.len()));
            }
            sql.push_str(&format!(" AND status IN ({})", marks.join(", ")));
        }
        sql.push_str(" ORDER BY created_at DESC, request_id");
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list requests"))?;
        rows.iter().map(decode).collect()
    }
}
