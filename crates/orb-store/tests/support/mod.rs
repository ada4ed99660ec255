//! What the store's test files share.

/// The PostgreSQL server to run a `*_on_postgres` test against, or `None` to skip it. Under
/// `ORB_REQUIRE_POSTGRES` (scripts/test.sh starts a server and sets both) a missing URL is a
/// broken set-up and fails the test instead.
pub fn postgres_url() -> Option<String> {
    match std::env::var("ORB_TEST_POSTGRES_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                std::env::var_os("ORB_REQUIRE_POSTGRES").is_none(),
                "ORB_REQUIRE_POSTGRES is set but ORB_TEST_POSTGRES_URL is not"
            );
            eprintln!("skipped: ORB_TEST_POSTGRES_URL unset");
            None
        }
    }
}
