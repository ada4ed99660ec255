//! Machine rows.

use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::kept::KeptCache;
use orb_core::machine::{Machine, MachineList};
use sqlx::any::{Any, AnyRow};
use sqlx::{AssertSqlSafe, Transaction};

use crate::codec::{RowReader, micros, opt_micros, to_json};
use crate::{Backend, Result, Store, StoreError};

pub(crate) const MACHINE_COLUMNS: &str = "machine_id, name, request_id, return_request_id, template_id, \
    provider_name, provider_api, resource_id, uid, status, status_reason, private_ip, public_ip, \
    launch_time, instance_type, price_type, tags, provider_data, created_at, updated_at, version";

/// Statuses of machines whose objects are gone (see `MachineStatus::is_live`).
const GONE: &str = "('terminated', 'returned')";

/// Keys per statement of a lookup by id (each is bound twice: id and name).
pub const KEYS_PER_QUERY: usize = 1_000;

/// The order machine lists come back in.
const ORDER: &str = "created_at, machine_id";

/// Which machines to list; `None`/`false` fields match everything. Oldest first.
#[derive(Debug, Clone, Default)]
pub struct MachineFilter {
    /// Only machines whose objects may still exist (not terminated or returned).
    pub live_only: bool,
    /// Only machines not already part of a return request.
    pub not_returning: bool,
    pub template_id: Option<String>,
    pub request_id: Option<RequestId>,
    pub return_request_id: Option<RequestId>,
}

impl MachineFilter {
    /// The machines of `request`: an acquire's own, or those a return covers.
    pub fn of_request(request: &orb_core::request::Request) -> Self {
        match request.request_type {
            orb_core::request::RequestType::Acquire => Self {
                request_id: Some(request.request_id.clone()),
                ..Default::default()
            },
            orb_core::request::RequestType::Return => Self {
                return_request_id: Some(request.request_id.clone()),
                ..Default::default()
            },
        }
    }
}

/// One machine's columns as stored, in `MACHINE_COLUMNS` order, before any checking. Both
/// ways of reading machines (a row each, or one JSON array for the whole list) produce this,
/// and [`MachineColumns::into_machine`] checks it once.
#[derive(Debug, serde::Deserialize)]
struct MachineColumns(
    String,         // machine_id
    String,         // name
    String,         // request_id
    Option<String>, // return_request_id
    String,         // template_id
    String,         // provider_name
    Option<String>, // provider_api
    Option<String>, // resource_id
    Option<String>, // uid
    String,         // status
    Option<String>, // status_reason
    Option<String>, // private_ip
    Option<String>, // public_ip
    Option<i64>,    // launch_time
    Option<String>, // instance_type
    Option<String>, // price_type
    String,         // tags
    String,         // provider_data
    i64,            // created_at
    i64,            // updated_at
    i64,            // version
);

impl MachineColumns {
    fn from_row(row: &AnyRow) -> Result<Self> {
        let r = RowReader::new(row, "machine", "machine_id");
        Ok(Self(
            r.text("machine_id")?,
            r.text("name")?,
            r.text("request_id")?,
            r.opt_text("return_request_id")?,
            r.text("template_id")?,
            r.text("provider_name")?,
            r.opt_text("provider_api")?,
            r.opt_text("resource_id")?,
            r.opt_text("uid")?,
            r.text("status")?,
            r.opt_text("status_reason")?,
            r.opt_text("private_ip")?,
            r.opt_text("public_ip")?,
            r.opt_int("launch_time")?,
            r.opt_text("instance_type")?,
            r.opt_text("price_type")?,
            r.text("tags")?,
            r.text("provider_data")?,
            r.int("created_at")?,
            r.int("updated_at")?,
            r.int("version")?,
        ))
    }

    fn into_machine(self) -> Result<Machine> {
        let Self(
            machine_id,
            name,
            request_id,
            return_request_id,
            template_id,
            provider_name,
            provider_api,
            resource_id,
            uid,
            status,
            status_reason,
            private_ip,
            public_ip,
            launch_time,
            instance_type,
            price_type,
            tags,
            provider_data,
            created_at,
            updated_at,
            version,
        ) = self;
        let corrupt = |column: &str, message: String| StoreError::Corrupt {
            entity: "machine",
            id: machine_id.clone(),
            message: format!("column {column}: {message}"),
        };
        let id = |column: &str, text: &str| {
            RequestId::parse(text).map_err(|e| corrupt(column, e.to_string()))
        };
        let time = |column: &str, micros: i64| {
            jiff::Timestamp::from_microsecond(micros).map_err(|e| corrupt(column, e.to_string()))
        };
        Ok(Machine {
            request_id: id("request_id", &request_id)?,
            return_request_id: return_request_id
                .map(|text| id("return_request_id", &text))
                .transpose()?,
            status: status.parse().map_err(|e| corrupt("status", e))?,
            launch_time: launch_time
                .map(|micros| time("launch_time", micros))
                .transpose()?,
            tags: serde_json::from_str(&tags).map_err(|e| corrupt("tags", e.to_string()))?,
            provider_api: provider_api
                .map(|text| text.parse().map_err(|e| corrupt("provider_api", e)))
                .transpose()?,
            provider_data: serde_json::from_str(&provider_data)
                .map_err(|e| corrupt("provider_data", e.to_string()))?,
            created_at: time("created_at", created_at)?,
            updated_at: time("updated_at", updated_at)?,
            machine_id,
            name,
            template_id,
            provider_name,
            resource_id,
            uid,
            status_reason,
            private_ip,
            public_ip,
            instance_type,
            price_type,
            version,
        })
    }
}

pub(crate) fn decode(row: &AnyRow) -> Result<Machine> {
    MachineColumns::from_row(row)?.into_machine()
}

/// A query for the machines matching `condition` that returns them all as one JSON text
/// value: an array holding an array of `MACHINE_COLUMNS` per machine, in no particular order
/// (an ORDER BY inside the aggregate costs SQLite a temporary b-tree of every row; the caller
/// sorts). Reading 500 machines row by row costs a copy and a conversion of each of 10,500
/// values (26 us a machine on SQLite); one text value is parsed in a fraction of that.
pub(crate) fn aggregate_sql(backend: Backend, condition: &str) -> String {
    aggregate_of(backend, MACHINE_COLUMNS, condition)
}

/// `columns` of the machines matching `condition` as one JSON text value, an array per machine
/// (see [`aggregate_sql`]).
fn aggregate_of(backend: Backend, columns: &str, condition: &str) -> String {
    match backend {
        Backend::Sqlite => format!(
            "SELECT json_group_array(json_array({columns})) FROM machines WHERE {condition}"
        ),
        Backend::Postgres => format!(
            "SELECT COALESCE(json_agg(json_build_array({columns})), '[]'::json)::text \
             FROM machines WHERE {condition}"
        ),
    }
}

/// The machines of one [`aggregate_sql`] value, in list order; `None` when the text does not
/// decode as machine columns (a hand-edited row of the wrong type: only a read row by row
/// names the machine and column at fault).
pub(crate) fn from_aggregate(text: &str) -> Option<Result<Vec<Machine>>> {
    let columns = serde_json::from_str::<Vec<MachineColumns>>(text).ok()?;
    Some(
        columns
            .into_iter()
            .map(MachineColumns::into_machine)
            .collect::<Result<_>>()
            .map(in_list_order),
    )
}

/// A query for the `machine_id version` pairs of the machines matching `condition`, as one
/// text value (NULL when none match): enough to tell whether a list read before is still
/// what is stored, since every write of a machine raises its version.
fn versions_sql(backend: Backend, condition: &str) -> String {
    match backend {
        Backend::Sqlite => format!(
            "SELECT group_concat(machine_id || ' ' || version, ',') FROM machines WHERE {condition}"
        ),
        Backend::Postgres => format!(
            "SELECT string_agg(machine_id || ' ' || version::text, ',') FROM machines \
             WHERE {condition}"
        ),
    }
}

/// How many machines the lists kept by [`ListCache`] may hold in all; beyond it the least
/// recently used lists are dropped.
const LIST_CACHE_MACHINES: usize = 20_000;

/// The machines of a request as this process last read them, so that a status read of a
/// request whose machines nobody changed costs a scan of their versions instead of decoding
/// every row (at 500 machines, the decoding was the larger half of a status read). A kept
/// list is used only when the database holds exactly the same machines at exactly the same
/// versions, or nothing was committed since it was proven so; any write by any process
/// raises a version and so makes it stale. Kept lists are shared with the lists handed out:
/// a read that changes nothing copies nothing.
pub(crate) type ListCache = KeptCache<MachineList, LIST_CACHE_MACHINES>;

/// The list kept under `key` if `versions` (the database's `id version` pairs) match it
/// exactly; it is then proven current as of `token`.
fn kept_list(
    lists: &ListCache,
    key: &str,
    versions: &str,
    token: Option<String>,
) -> Option<MachineList> {
    lists.kept_if(key, |kept| {
        let current = same_versions(&kept.value, versions);
        if current {
            kept.proven = token;
        }
        current
    })
}

/// Keeps `machines` under `key` in place of the list there when the two are the same
/// machines at the same versions and equal: `machines` is a copy of the kept list that a
/// status read folded its observations into without changing anything, but whose tags and
/// provider data now share the provider's allocations, so the next read's comparison is a
/// pointer check and needs no copy.
fn share_values(lists: &ListCache, key: &str, machines: &MachineList) {
    lists.replace_with(key, |kept| {
        // Equal machines are the same machines at the same versions, with equal values.
        if !MachineList::ptr_eq(kept, machines) && *kept == *machines {
            *kept = machines.clone();
        }
    });
}

/// Marks a fresh SQLite connection with an id of its own (a temporary table only it sees),
/// so that a [`Store::commit_token`] read on one connection never equals one read on another.
/// Never fails the connection: without the mark there is no token, and kept lists are
/// checked by their versions as before.
pub(crate) async fn mark_connection(
    connection: &mut sqlx::AnyConnection,
) -> std::result::Result<(), sqlx::Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for statement in [
        "CREATE TEMP TABLE IF NOT EXISTS orb_connection (id BIGINT NOT NULL)".to_string(),
        "DELETE FROM temp.orb_connection".to_string(),
        format!("INSERT INTO temp.orb_connection (id) VALUES ({id})"),
    ] {
        let done = sqlx::query(AssertSqlSafe(statement))
            .execute(&mut *connection)
            .await;
        if done.is_err() {
            break;
        }
    }
    Ok(())
}

impl Store {
    /// On SQLite, a token that changes whenever anything is committed to the database: by
    /// another connection (`PRAGMA data_version`, which also sees other processes' commits),
    /// by this one (`total_changes()`: the pool has one connection), or when the pool has
    /// opened a new connection (its mark). Equal tokens mean nothing was committed in between,
    /// so a machine list proven current at the first is still current. `None` on PostgreSQL,
    /// and whenever the token cannot be read (the list is then checked by its versions).
    pub(crate) async fn commit_token(&self) -> Option<String> {
        if self.backend != Backend::Sqlite {
            return None;
        }
        sqlx::query_scalar::<_, String>(
            "SELECT (SELECT id FROM temp.orb_connection) || ' ' || \
             (SELECT data_version FROM pragma_data_version) || ' ' || total_changes()",
        )
        .fetch_one(&self.pool)
        .await
        .ok()
    }
}

/// The column, request id and [`ListCache`] key of a filter for exactly one request's
/// machines (an acquire's or a return's): the only lists kept.
pub(crate) fn one_request(filter: &MachineFilter) -> Option<(&'static str, &RequestId, String)> {
    if filter.live_only || filter.not_returning || filter.template_id.is_some() {
        return None;
    }
    let (column, id) = match (&filter.request_id, &filter.return_request_id) {
        (Some(id), None) => ("request_id", id),
        (None, Some(id)) => ("return_request_id", id),
        _ => return None,
    };
    Some((column, id, format!("{column} {id}")))
}

/// Whether `versions` (`id version` pairs joined by commas, in any order) names exactly the
/// machines of `machines` at their versions.
fn same_versions(machines: &[Machine], versions: &str) -> bool {
    let expected: foldhash::HashMap<&str, i64> = machines
        .iter()
        .map(|m| (m.machine_id.as_str(), m.version))
        .collect();
    let mut seen = 0;
    for pair in versions.split(',').filter(|p| !p.is_empty()) {
        let Some((id, version)) = pair.rsplit_once(' ') else {
            return false;
        };
        match (expected.get(id), version.parse::<i64>()) {
            (Some(want), Ok(got)) if *want == got => seen += 1,
            _ => return false,
        }
    }
    seen == expected.len()
}

/// Machine lists come back in creation order, ties broken by id (the `ORDER` of SQL reads).
fn in_list_order(mut machines: Vec<Machine>) -> Vec<Machine> {
    machines.sort_by(|a, b| (a.created_at, &a.machine_id).cmp(&(b.created_at, &b.machine_id)));
    machines
}

pub(crate) async fn write_machines(
    tx: &mut Transaction<'_, Any>,
    machines: &[Machine],
) -> Result<()> {
    for m in machines {
        if m.version == 0 {
            let sql = format!(
                "INSERT INTO machines ({MACHINE_COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, 1)"
            );
            bind_fields(sqlx::query(AssertSqlSafe(sql)), m)
                .execute(&mut **tx)
                .await
                .map_err(StoreError::on_insert(
                    "machine",
                    m.machine_id.clone(),
                    "insert a machine",
                ))?;
        } else {
            let result = bind_fields(
                sqlx::query(
                    "UPDATE machines SET machine_id = $1, name = $2, request_id = $3, \
                     return_request_id = $4, template_id = $5, provider_name = $6, provider_api = $7, \
                     resource_id = $8, uid = $9, status = $10, status_reason = $11, private_ip = $12, \
                     public_ip = $13, launch_time = $14, instance_type = $15, price_type = $16, \
                     tags = $17, provider_data = $18, created_at = $19, updated_at = $20, \
                     version = version + 1 WHERE machine_id = $21 AND version = $22",
                ),
                m,
            )
            .bind(m.machine_id.clone())
            .bind(m.version)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("update a machine"))?;
            StoreError::expect_updated(
                result.rows_affected(),
                "machine",
                m.machine_id.clone(),
                m.version,
            )?;
        }
    }
    Ok(())
}

type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>;

fn bind_fields<'q>(query: AnyQuery<'q>, m: &Machine) -> AnyQuery<'q> {
    query
        .bind(m.machine_id.clone())
        .bind(m.name.clone())
        .bind(m.request_id.to_string())
        .bind(m.return_request_id.as_ref().map(ToString::to_string))
        .bind(m.template_id.clone())
        .bind(m.provider_name.clone())
        .bind(m.provider_api.map(ProviderApi::as_str))
        .bind(m.resource_id.clone())
        .bind(m.uid.clone())
        .bind(m.status.as_str())
        .bind(m.status_reason.clone())
        .bind(m.private_ip.clone())
        .bind(m.public_ip.clone())
        .bind(opt_micros(m.launch_time))
        .bind(m.instance_type.clone())
        .bind(m.price_type.clone())
        .bind(to_json(&m.tags))
        .bind(to_json(&m.provider_data))
        .bind(micros(m.created_at))
        .bind(micros(m.updated_at))
}

impl Store {
    pub async fn list_machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>> {
        let mut condition = String::from("1 = 1");
        let mut binds: Vec<String> = Vec::new();
        if filter.live_only {
            condition.push_str(&format!(" AND status NOT IN {GONE}"));
        }
        if filter.not_returning {
            condition.push_str(" AND return_request_id IS NULL");
        }
        for (column, value) in [
            ("template_id", filter.template_id.clone()),
            (
                "request_id",
                filter.request_id.as_ref().map(ToString::to_string),
            ),
            (
                "return_request_id",
                filter.return_request_id.as_ref().map(ToString::to_string),
            ),
        ] {
            if let Some(value) = value {
                binds.push(value);
                condition.push_str(&format!(" AND {column} = ${}", binds.len()));
            }
        }
        self.select_machines(&condition, &binds, "list machines")
            .await
    }

    /// The template and name of every machine whose object may still exist, in list order:
    /// what a template listing reports as its `requestedMachines` and counts against
    /// `maxNumber`. Two columns instead of whole machines, so listing templates stays cheap
    /// with tens of thousands of machines.
    pub async fn live_machine_names(&self) -> Result<Vec<(String, String)>> {
        // One JSON text value rather than a row per machine: sqlx hands rows over one by one,
        // which cost more than the scan itself at thousands of machines.
        let sql = aggregate_of(
            self.backend,
            "template_id, name, created_at, machine_id",
            &format!("status NOT IN {GONE}"),
        );
        let text = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("list the names of live machines"))?;
        let mut rows: Vec<(String, String, i64, String)> =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                entity: "machine",
                id: "(the live machines' names)".into(),
                message: format!(
                    "the template, name, creation time or id of a row is unreadable: {e}"
                ),
            })?;
        rows.sort_by(|a, b| (a.2, &a.3).cmp(&(b.2, &b.3)));
        Ok(rows.into_iter().map(|(t, name, ..)| (t, name)).collect())
    }

    /// The machines of one request (`request_id` or `return_request_id` of `filter`, and
    /// nothing else set), as [`Store::list_machines`] reads them, reusing this process's
    /// last read of the same list when no machine of it changed since.
    pub async fn request_machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>> {
        Ok(self.request_machine_list(filter).await?.into_inner())
    }

    /// [`Store::request_machines`], shared with the list this process keeps instead of
    /// copied: for a caller that mostly reads it (a status read copies it only if it changes
    /// a machine).
    pub async fn request_machine_list(&self, filter: &MachineFilter) -> Result<MachineList> {
        let Some((column, id, key)) = one_request(filter) else {
            return Ok(self.list_machines(filter).await?.into());
        };
        let condition = format!("{column} = $1");
        // With nothing kept to compare with (always so in a one-call process, such as a
        // HostFactory script's), neither the token nor the scan of versions would help.
        let holds = self.lists.holds(&key);
        let token = if holds {
            self.commit_token().await
        } else {
            None
        };
        if let Some(kept) = token
            .as_deref()
            .and_then(|token| self.lists.get_unchanged(&key, token))
        {
            return Ok(kept);
        }
        if holds {
            let versions: Option<String> =
                sqlx::query_scalar(AssertSqlSafe(versions_sql(self.backend, &condition)))
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(StoreError::db("list machine versions"))?;
            if let Some(kept) = kept_list(
                &self.lists,
                &key,
                &versions.unwrap_or_default(),
                token.clone(),
            ) {
                return Ok(kept);
            }
        }
        let machines: MachineList = self
            .select_machines(&condition, &[id.to_string()], "list machines")
            .await?
            .into();
        self.lists.put(key, machines.clone(), token);
        Ok(machines)
    }

    /// Hands [`Store::request_machine_list`] back the list it returned for `filter`, after a
    /// status read compared it with the provider's observations and changed nothing: the
    /// kept list becomes the read's copy, whose tags and provider data share the provider's
    /// allocations, so the next read's comparison is a pointer check (at 5,000 machines the
    /// comparison by content was a tenth of a status read through `orb serve`) and the list
    /// is not copied again.
    pub fn share_request_machines(&self, filter: &MachineFilter, machines: &MachineList) {
        if let Some((_, _, key)) = one_request(filter) {
            share_values(&self.lists, &key, machines);
        }
    }

    /// The requests (by id) that own at least one machine whose object may still exist:
    /// finished acquires among them are the ones `orb serve` keeps following.
    pub async fn requests_with_live_machines(&self) -> Result<Vec<RequestId>> {
        let sql = format!("SELECT DISTINCT request_id FROM machines WHERE status NOT IN {GONE}");
        let ids: Vec<String> = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list requests with live machines"))?;
        ids.iter()
            .map(|id| {
                RequestId::parse(id).map_err(|e| StoreError::Corrupt {
                    entity: "machine",
                    id: id.clone(),
                    message: format!("request_id is not a request id: {e}"),
                })
            })
            .collect()
    }

    /// Machines whose `machine_id` or `name` is one of `keys` (HostFactory may name a host
    /// either way).
    ///
    /// Looked up in chunks of [`KEYS_PER_QUERY`]: one statement with tens of thousands of
    /// parameters goes past SQLite's limit of 32,766 bound variables.
    pub async fn find_machines(&self, keys: &[String]) -> Result<Vec<Machine>> {
        let mut found: Vec<Machine> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for chunk in keys.chunks(KEYS_PER_QUERY) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let list = marks.join(", ");
            let condition = format!("machine_id IN ({list}) OR name IN ({list})");
            for m in self
                .select_machines(&condition, chunk, "look up machines")
                .await?
            {
                // A machine named by id in one chunk and by host name in another is one.
                if seen.insert(m.machine_id.clone()) {
                    found.push(m);
                }
            }
        }
        if keys.len() > KEYS_PER_QUERY {
            found = in_list_order(found);
        }
        Ok(found)
    }

    /// The machines matching `condition` (with `$1`.. bound to `binds`), in list order: read
    /// as one JSON value, or, when that does not decode (a hand-edited row of the wrong
    /// type), row by row, which names the machine and column at fault.
    async fn select_machines(
        &self,
        condition: &str,
        binds: &[String],
        action: &'static str,
    ) -> Result<Vec<Machine>> {
        let mut query =
            sqlx::query_scalar::<_, String>(AssertSqlSafe(aggregate_sql(self.backend, condition)));
        for value in binds {
            query = query.bind(value.clone());
        }
        let text = query
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db(action))?;
        if let Some(machines) = from_aggregate(&text) {
            return machines;
        }
        let sql =
            format!("SELECT {MACHINE_COLUMNS} FROM machines WHERE {condition} ORDER BY {ORDER}");
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value.clone());
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(action))?;
        rows.iter().map(decode).collect()
    }
}
