//! A PostgreSQL server that is not there fails fast: opening the store gives up after
//! `POSTGRES_ACQUIRE_TIMEOUT` (not sqlx's default 30 s of retried connects) with a message
//! naming the URL. The restart of a live server mid-request is tested end to end in
//! crates/orb/tests/cluster/postgres_restart.rs.

use std::time::{Duration, Instant};

use orb_store::{POSTGRES_ACQUIRE_TIMEOUT, Store, StoreError};

#[tokio::test]
async fn opening_an_unreachable_postgres_fails_within_the_acquire_timeout() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://orb@127.0.0.1:{port}/orb");
    let started = Instant::now();
    let err = Store::open(&url).await.expect_err("nothing listens there");
    let took = started.elapsed();
    assert!(
        took < POSTGRES_ACQUIRE_TIMEOUT + Duration::from_secs(5),
        "gave up after {took:?}"
    );
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}
