//! Request claims between processes (two stores on one database stand for two processes: each
//! has its own connections and file handles): one holder at a time, and the claim is free again
//! once its holder lets go. On SQLite always, on PostgreSQL when `ORB_TEST_POSTGRES_URL` names
//! a server. That a killed holder lets go is shown by the kill tests of the orb crate.

mod support;

use orb_core::ids::RequestId;
use orb_store::Store;

async fn one_holder_at_a_time(a: Store, b: Store) {
    let id = RequestId::new_acquire();
    let held = a
        .try_claim(&id)
        .await
        .unwrap()
        .expect("a free claim is granted");
    assert!(
        b.try_claim(&id).await.unwrap().is_none(),
        "another process cannot take a held claim"
    );
    assert!(
        a.try_claim(&id).await.unwrap().is_none(),
        "nor can the holder's own process take it twice"
    );
    let other = RequestId::new_acquire();
    assert!(
        b.try_claim(&other).await.unwrap().is_some(),
        "claims are per request"
    );
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        b.try_claim(&id).await.unwrap().is_some(),
        "given back, the claim can be taken"
    );
}

#[tokio::test]
async fn claims_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    let a = Store::open_sqlite_file(&path).await.unwrap();
    let b = Store::open_sqlite_file(&path).await.unwrap();
    one_holder_at_a_time(a, b).await;
}

#[tokio::test]
async fn claims_on_postgres() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let a = Store::open(&url).await.unwrap();
    let b = Store::open(&url).await.unwrap();
    one_holder_at_a_time(a, b).await;
}
