//! Machine rows.

use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use sqlx::any::{Any, AnyRow};
use sqlx::{AssertSqlSafe, Transaction};

use crate::codec::{RowReader, micros, opt_micros, to_json};
use crate::{Result, Store, StoreError};

const MACHINE_COLUMNS: &str = "machine_id, name, request_id, return_request_id, template_id, \
    provider_name, provider_api, resource_id, uid, status, status_reason, private_ip, public_ip, \
    launch_time, instance_type, price_type, tags, provider_data, created_at, updated_at, version";

/// Statuses that no longer hold capacity.
const GONE: &str = "('terminated', 'returned', 'failed')";

/// Which machines to list; `None`/`false` fields match everything. Oldest first.
#[derive(Debug, Clone, Default)]
pub struct MachineFilter {
    /// Only machines that may still hold capacity (not terminated, returned or failed).
    pub live_only: bool,
    /// Only machines not already part of a return request.
    pub not_returning: bool,
    pub template_id: Option<String>,
    pub request_id: Option<RequestId>,
    pub return_request_id: Option<RequestId>,
}

fn parse_id(r: &RowReader<'_>, column: &str) -> Result<Option<RequestId>> {
    r.opt_text(column)?
        .map(|id| {
            RequestId::parse(&id).map_err(|e| StoreError::Corrupt {
                entity: "machine",
                id: r.id.clone(),
                message: format!("column {column}: {e}"),
            })
        })
        .transpose()
}

fn decode(row: &AnyRow) -> Result<Machine> {
    let r = RowReader::new(row, "machine", "machine_id");
    let request_id = parse_id(&r, "request_id")?.ok_or_else(|| StoreError::Corrupt {
        entity: "machine",
        id: r.id.clone(),
        message: "column request_id is empty".into(),
    })?;
    Ok(Machine {
        machine_id: r.text("machine_id")?,
        name: r.text("name")?,
        request_id,
        return_request_id: parse_id(&r, "return_request_id")?,
        template_id: r.text("template_id")?,
        provider_name: r.text("provider_name")?,
        provider_api: r.opt_text("provider_api")?,
        resource_id: r.opt_text("resource_id")?,
        uid: r.opt_text("uid")?,
        status: r.parsed::<MachineStatus>("status")?,
        status_reason: r.opt_text("status_reason")?,
        private_ip: r.opt_text("private_ip")?,
        public_ip: r.opt_text("public_ip")?,
        launch_time: r.opt_time("launch_time")?,
        instance_type: r.opt_text("instance_type")?,
        price_type: r.opt_text("price_type")?,
        tags: r.json("tags")?,
        provider_data: r.json("provider_data")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
        version: r.int("version")?,
    })
}

/// Inserts new machines (version 0) and updates known ones (version check), inside `tx`.
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
        .bind(m.provider_api.clone())
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
        let mut sql = format!("SELECT {MACHINE_COLUMNS} FROM machines WHERE 1 = 1");
        let mut binds: Vec<String> = Vec::new();
        if filter.live_only {
            sql.push_str(&format!(" AND status NOT IN {GONE}"));
        }
        if filter.not_returning {
            sql.push_str(" AND return_request_id IS NULL");
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
                sql.push_str(&format!(" AND {column} = ${}", binds.len()));
            }
        }
        sql.push_str(" ORDER BY created_at, machine_id");
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list machines"))?;
        rows.iter().map(decode).collect()
    }

    /// Machines whose `machine_id` or `name` is one of `keys` (HostFactory may name a host
    /// either way).
    pub async fn find_machines(&self, keys: &[String]) -> Result<Vec<Machine>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=keys.len()).map(|i| format!("${i}")).collect();
        let list = marks.join(", ");
        let sql = format!(
            "SELECT {MACHINE_COLUMNS} FROM machines WHERE machine_id IN ({list}) OR name IN ({list}) \
             ORDER BY created_at, machine_id"
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for key in keys {
            query = query.bind(key.clone());
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("look up machines"))?;
        rows.iter().map(decode).collect()
    }
}
