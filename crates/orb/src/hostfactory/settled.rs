//! getRequestStatus answered from a SQLite store on this process's own thread, when a script
//! call runs without a daemon and every request it names is settled: finished, recorded, and
//! holding nothing that can still change, so a broker would read storage and ask nobody.
//! HostFactory polls such requests over and over; this way a poll is a few reads, with no
//! sqlx connection thread to start and wake for each of them. Anything else (a request still
//! followed on the cluster, a file to create or migrate, a read that fails) goes the full
//! way, which also reports every problem.

use serde_json::Value;

use orb_core::hostfactory::input::RequestStatusQuery;
use orb_store::SameThreadReader;

use super::operations::{ScriptReply, status_reply};
use crate::context;
use crate::session::Session;

/// The reply to getRequestStatus with `input` from storage alone; `None` when the call must
/// go the full way (see the module's note). The reply is the full way's, byte for byte.
pub fn status_from_storage(session: &Session, input: Option<&Value>) -> Option<ScriptReply> {
    let query = RequestStatusQuery::parse(input?).ok()?;
    let loaded = session.config().ok()?;
    // The full way builds the Kubernetes provider before anything else, so a configuration
    // it refuses fails every call, this one included; the same check, and its report left
    // to the full way, which takes this provider (or failure) from the session as it is.
    session.kubernetes_provider().ok()?;
    let url = context::storage_url(&loaded.config, &session.dirs);
    let reader = SameThreadReader::open(&url)
        .inspect_err(|why| tracing::debug!(%why, "getRequestStatus not read on this thread"))
        .ok()?;
    let found = orb_broker::settled_statuses(&reader, &query.request_ids)?;
    // Closed before the reply is written, as the full way closes its store.
    drop(reader);
    Some(status_reply(&found, None))
}
