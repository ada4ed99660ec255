//! maxNumber holds under concurrency: twenty acquires of 5 against a template with room for 60
//! race through twenty separate stores (separate connection pools, as separate processes
//! have) on one database; exactly twelve are stored. On SQLite always, on PostgreSQL when
//! `ORB_TEST_POSTGRES_URL` names a server.

mod support;

use jiff::Timestamp;
use orb_core::ProviderApi;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::test_support;
use orb_store::{RequestFilter, Store, StoreError, TemplateLimit};

fn acquire(template: &str, count: u32) -> Request {
    test_support::request(RequestType::Acquire)
        .template(template)
        .provider("kubernetes", "k8s")
        .count(count)
        .created(Timestamp::now())
        .status(RequestStatus::InProgress)
        .build()
}

fn machine(request: &Request, id: &str) -> Machine {
    test_support::machine(id)
        .of(request)
        .kind(ProviderApi::Pod)
        .status(MachineStatus::Pending)
        .created(Timestamp::now())
        .updated(Timestamp::now())
        .build()
}

async fn race(open: impl Fn() -> futures::future::BoxFuture<'static, Store>) {
    let template = format!("race-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let mut stores = Vec::new();
    for _ in 0..20 {
        stores.push(open().await);
    }
    let tasks: Vec<_> = stores
        .iter()
        .cloned()
        .map(|store| {
            let template = template.clone();
            tokio::spawn(async move {
                let mut request = acquire(&template, 5);
                let limit = TemplateLimit {
                    template_id: template.clone(),
                    max: 60,
                };
                store.insert_acquire(&mut request, Some(&limit)).await?;
                // Then its machines, as the provider's answer is stored: the reservation
                // becomes machines while other acquires are being checked.
                let mut machines: Vec<Machine> = (0..5)
                    .map(|i| machine(&request, &format!("{}-{i}", request.request_id)))
                    .collect();
                store.update_request(&mut request, &mut machines).await
            })
        })
        .collect();
    let mut stored = 0;
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => stored += 1,
            Err(StoreError::LimitExceeded { .. }) => refused += 1,
            Err(other) => panic!("neither stored nor refused for the limit: {other}"),
        }
    }
    assert_eq!(
        (stored, refused),
        (12, 8),
        "12 x 5 fill maxNumber 60 exactly"
    );
    let in_db = stores[0]
        .list_requests(&RequestFilter {
            template_id: Some(template.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(in_db.len(), 12, "nothing half-stored for the refused ones");
    let usage = stores[0].template_usage(&template).await.unwrap();
    assert_eq!((usage.live, usage.reserved), (60, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_never_exceed_max_number_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    Store::open_sqlite_file(&path).await.unwrap();
    race(move || {
        let path = path.clone();
        Box::pin(async move { Store::open_sqlite_file(&path).await.unwrap() })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_never_exceed_max_number_on_postgres() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    race(move || {
        let url = url.clone();
        Box::pin(async move { Store::open(&url).await.unwrap() })
    })
    .await;
}
