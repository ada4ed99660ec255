//! `orb requests status|list|cancel|list-returns|purge|cleanup`. With HostFactory conventions, status and
//! list-returns are the getRequestStatus and getReturnRequests operations ([`hostfactory`]).

use orb_core::hostfactory::input::{RequestStatusQuery, ReturnRequestsQuery};
use orb_core::ids::RequestId;
use orb_core::request::RequestType;
use orb_store::RequestFilter;
use serde_json::json;

use super::machines::view_table;
use crate::cli::RequestsCommand;
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::hostfactory;
use crate::render::{self, Table, or_dash};
use crate::session::{Output, Session};
use orb_broker::Lookup;

pub async fn run(session: &Session, command: RequestsCommand) -> CliResult<Output> {
    match command {
        RequestsCommand::Status { request_ids } => status(session, request_ids).await,
        RequestsCommand::List { limit } => list(session, limit).await,
        RequestsCommand::Cancel { request_id } => cancel(session, &request_id).await,
        RequestsCommand::ListReturns => list_returns(session).await,
        RequestsCommand::Purge { request_id } => purge(session, &request_id).await,
        RequestsCommand::Cleanup {
            older_than_days,
            older_than_seconds,
            statuses,
            dry_run,
        } => {
            let older_than = match (older_than_days, older_than_seconds) {
                (Some(days), _) => jiff::SignedDuration::from_hours(i64::from(days) * 24),
                (None, Some(secs)) => {
                    jiff::SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX))
                }
                (None, None) => {
                    return Err(Failure::invalid(
                        "say how old a finished request must be: --older-than-days N",
                    ));
                }
            };
            let statuses = statuses
                .iter()
                .map(|s| s.parse().map_err(|e: String| Failure::invalid(e)))
                .collect::<CliResult<Vec<_>>>()?;
            cleanup(
                session,
                orb_broker::purge::CleanupAsk {
                    older_than,
                    statuses,
                    dry_run,
                },
            )
            .await
        }
    }
}

async fn purge(session: &Session, raw: &str) -> CliResult<Output> {
    let id = RequestId::parse(raw).map_err(|e| Failure::invalid(e.to_string()))?;
    let loaded = session.config()?;
    let (broker, _) = session.broker(&loaded).await?;
    let purged = broker.purge_request(&id).await?;
    let reply =
        json!({"purged": true, "request_id": id.to_string(), "machine_ids": purged.machine_ids});
    Ok(Output::ok(render::render(
        &reply,
        session.global.output,
        || {
            let mut t = Table::new(vec!["PURGED", "ID"]);
            t.row(vec!["request".into(), id.to_string()]);
            for m in &purged.machine_ids {
                t.row(vec!["machine".into(), m.clone()]);
            }
            t
        },
    )?))
}

async fn cleanup(session: &Session, ask: orb_broker::purge::CleanupAsk) -> CliResult<Output> {
    let loaded = session.config()?;
    let (broker, _) = session.broker(&loaded).await?;
    let done = broker.cleanup(&ask).await?;
    let kept: Vec<serde_json::Value> = done
        .kept
        .iter()
        .map(|(id, reason)| json!({"request_id": id.to_string(), "reason": reason}))
        .collect();
    let reply = json!({
        "dry_run": done.dry_run,
        "cutoff": done.cutoff.to_string(),
        "requests_removed": done.removed.request_ids.len(),
        "machines_removed": done.removed.machine_ids.len(),
        "request_ids": done.removed.request_ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "kept": kept,
    });
    Ok(Output::ok(render::render(
        &reply,
        session.global.output,
        || {
            let verb = if done.dry_run {
                "would remove"
            } else {
                "removed"
            };
            let mut t = Table::new(vec!["REQUEST", "OUTCOME"]);
            for id in &done.removed.request_ids {
                t.row(vec![id.to_string(), verb.into()]);
            }
            for (id, reason) in &done.kept {
                t.row(vec![id.to_string(), format!("kept: {reason}")]);
            }
            t
        },
    )?))
}

async fn status(session: &Session, positional: Vec<String>) -> CliResult<Output> {
    let ids = match context::hostfactory_input(&session.global)? {
        Some(value) => {
            RequestStatusQuery::parse(&value)
                .map_err(|e| Failure::invalid(e.to_string()))?
                .request_ids
        }
        None if !positional.is_empty() => positional,
        None => {
            return Err(Failure::invalid(
                "name the requests (`orb requests status <id>...`) or pass HostFactory JSON via -f/-d",
            ));
        }
    };
    let loaded = session.config()?;
    if session.is_hostfactory(&loaded) {
        let env = session.hostfactory_env(&loaded).await?;
        return hostfactory::get_request_status(&env, &ids)
            .await
            .map(Output::from);
    }
    let (broker, _) = session.broker(&loaded).await?;
    let mut views = Vec::new();
    let mut unknown = Vec::new();
    let mut notes = Vec::new();
    for found in broker.statuses(&ids).await? {
        match found {
            Lookup::Found(view) => {
                notes.extend(hostfactory::stale_warning(&view));
                views.push(*view);
            }
            Lookup::Unknown(raw) => unknown.push(raw),
        }
    }
    if !unknown.is_empty() {
        return Err(Failure::invalid(format!(
            "request {} not found; `orb requests list` shows recent requests",
            unknown.join(", ")
        )));
    }
    let stdout = render::render(&views, session.global.output, || {
        let mut all = Table::default();
        for view in &views {
            let t = view_table(view);
            all.headers = t.headers;
            all.rows.extend(t.rows);
        }
        all
    })?;
    Ok(Output {
        stdout,
        stderr: notes,
        exit: 0,
    })
}

async fn list(session: &Session, limit: u32) -> CliResult<Output> {
    let loaded = session.config()?;
    let store = session.open_store(&loaded).await?;
    let requests = store
        .list_requests(&RequestFilter {
            limit: Some(limit),
            ..Default::default()
        })
        .await?;
    Ok(Output::ok(render::render(
        &requests,
        session.global.output,
        || {
            let mut t = Table::new(vec![
                "REQUEST", "TYPE", "STATUS", "DONE", "TEMPLATE", "CREATED", "MESSAGE",
            ]);
            for r in &requests {
                t.row(vec![
                    r.request_id.to_string(),
                    r.request_type.as_str().into(),
                    r.status.to_string(),
                    format!("{}/{}", r.fulfilled_count, r.requested_count),
                    or_dash(r.template_id.as_deref()),
                    r.created_at.to_string(),
                    or_dash(r.status_message.as_deref()),
                ]);
            }
            t
        },
    )?))
}

async fn cancel(session: &Session, raw: &str) -> CliResult<Output> {
    let id = RequestId::parse(raw).map_err(|e| Failure::invalid(e.to_string()))?;
    let loaded = session.config()?;
    let (broker, _) = session.broker(&loaded).await?;
    let view = broker.cancel(&id).await?;
    Ok(Output::ok(render::render(
        &view,
        session.global.output,
        || view_table(&view),
    )?))
}

async fn list_returns(session: &Session) -> CliResult<Output> {
    let query = match context::hostfactory_input(&session.global)? {
        Some(value) => {
            ReturnRequestsQuery::parse(&value).map_err(|e| Failure::invalid(e.to_string()))?
        }
        None => ReturnRequestsQuery { machines: vec![] },
    };
    let loaded = session.config()?;
    if session.is_hostfactory(&loaded) {
        let env = session.hostfactory_env(&loaded).await?;
        return hostfactory::get_return_requests(&env, &query.machines)
            .await
            .map(Output::from);
    }
    let (broker, _) = session.broker(&loaded).await?;
    let (reclaims, note) = broker
        .reclaims(&hostfactory::machine_keys(&query.machines))
        .await?;
    let note = note.map(|n| format!("warning: {n}"));
    let returns = broker
        .list_requests(&RequestFilter {
            request_type: Some(RequestType::Return),
            limit: Some(50),
            ..Default::default()
        })
        .await?;
    let reply = json!({"reclaimed_by_cluster": reclaims, "return_requests": returns});
    let stdout = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["MACHINE", "GRACE", "REASON"]);
        for r in &reclaims {
            t.row(vec![
                r.name.clone(),
                r.grace_period_secs.to_string(),
                r.reason.clone(),
            ]);
        }
        t
    })?;
    Ok(Output::ok(stdout).note(note))
}
