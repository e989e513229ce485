//! The PostgreSQL test harness itself: a fresh schema per test really
//! isolates tables on the shared server, and a private cluster really stops,
//! comes back on the same URL and keeps its data. Both run inside tokio
//! tests, as the gateway's tests will.
//!
//! Without a reachable shared server or the PostgreSQL server binaries the
//! tests skip loudly; with `CI=true` they fail instead.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::pg::{
    FreshSchema, PrivateCluster, drop_schema, fresh_schema_url, shared_url, skip_unless_ci,
    split_schema, try_fresh_schema_url, with_client,
};

/// Whether the table `name` is visible on `url` (through its search_path).
fn table_visible(url: &str, name: &str) -> bool {
    with_client(url, |c| {
        let row = c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])?;
        row.try_get::<_, bool>(0)
    })
    .unwrap()
}

#[test]
fn schema_parameter_is_split_off_and_appended() {
    assert_eq!(
        split_schema("postgres://u@h:1/db?schema=t_ab"),
        ("postgres://u@h:1/db".to_string(), Some("t_ab".to_string()))
    );
    assert_eq!(
        split_schema("postgres://u@h:1/db?sslmode=disable&schema=t_ab"),
        (
            "postgres://u@h:1/db?sslmode=disable".to_string(),
            Some("t_ab".to_string())
        )
    );
    assert_eq!(
        split_schema("postgres://u@h:1/db"),
        ("postgres://u@h:1/db".to_string(), None)
    );
}

#[tokio::test]
async fn fresh_schemas_isolate_tables_on_the_shared_server() {
    let base = shared_url();
    let first = match try_fresh_schema_url(&base) {
        Ok(url) => url,
        Err(e) => return skip_unless_ci(&format!("shared server {base}: {e}")),
    };
    let second = fresh_schema_url(&base);
    let sep = if base.contains('?') { '&' } else { '?' };
    let guard = FreshSchema::new(&format!("{base}{sep}connect_timeout=5")).unwrap();

    let (plain, a) = split_schema(&first);
    let (_, b) = split_schema(&second);
    let a = a.unwrap();
    assert_eq!(plain, base);
    assert!(
        first.starts_with(&format!("{base}{sep}schema=t_")),
        "{first}"
    );
    assert_eq!(a.len(), 2 + 16, "t_ and 16 hex digits: {a}");
    assert!(a[2..].chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    assert_ne!(Some(a), b, "each call makes a new schema");
    assert!(
        guard.url.contains("connect_timeout=5&schema=t_"),
        "a base with a query gets &schema=: {}",
        guard.url
    );

    with_client(&first, |c| {
        c.batch_execute("CREATE TABLE widgets (id int); INSERT INTO widgets VALUES (7)")
    })
    .unwrap();
    assert!(table_visible(&first, "widgets"));
    assert!(
        !table_visible(&second, "widgets"),
        "leaked into another schema"
    );
    assert!(
        !table_visible(&guard.url, "widgets"),
        "leaked into another schema"
    );
    assert!(!table_visible(&base, "widgets"), "leaked into public");
    let n: i64 = with_client(&first, |c| {
        c.query_one("SELECT count(*) FROM widgets", &[])?.try_get(0)
    })
    .unwrap();
    assert_eq!(n, 1);

    // Dropping removes the schema and its tables; dropping twice, or a URL
    // without a schema, is harmless.
    drop_schema(&first);
    drop_schema(&first);
    drop_schema(&base);
    let gone = with_client(&first, |c| c.batch_execute("SELECT 1 FROM widgets"));
    assert!(gone.is_err(), "table survived drop_schema");
    let schemas: i64 = with_client(&base, |c| {
        c.query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&split_schema(&second).1.unwrap()],
        )?
        .try_get(0)
    })
    .unwrap();
    assert_eq!(schemas, 1, "dropping one schema left the other alone");
    drop_schema(&second);

    let guarded = split_schema(&guard.url).1.unwrap();
    drop(guard);
    let left: i64 = with_client(&base, |c| {
        c.query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&guarded],
        )?
        .try_get(0)
    })
    .unwrap();
    assert_eq!(left, 0, "FreshSchema dropped its schema");
}

#[test]
fn drop_schema_on_an_unreachable_server_does_not_panic() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    drop_schema(&format!(
        "postgres://postgres@127.0.0.1:{port}/test?schema=t_0"
    ));
}

#[tokio::test]
async fn private_cluster_survives_stop_and_restart() {
    let cluster = match PrivateCluster::start() {
        Ok(c) => c,
        Err(e) => return skip_unless_ci(&format!("cannot start a private cluster: {e}")),
    };
    let url = cluster.url();
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port())
    );
    assert_ne!(cluster.port(), 5432, "never the shared server");

    with_client(&url, |c| {
        c.batch_execute("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')")
    })
    .unwrap();

    cluster.stop().unwrap();
    let refused = with_client(&url, |c| c.batch_execute("SELECT 1"));
    assert!(refused.is_err(), "connected to a stopped cluster");

    cluster.start_again().unwrap();
    assert_eq!(cluster.url(), url, "same URL after a restart");
    let v: String =
        with_client(&url, |c| c.query_one("SELECT v FROM kept", &[])?.try_get(0)).unwrap();
    assert_eq!(v, "before", "data written before the stop is still there");

    with_client(&url, |c| {
        c.batch_execute("INSERT INTO kept VALUES ('again')")
    })
    .unwrap();
    cluster.restart().unwrap();
    let n: i64 = with_client(&url, |c| {
        c.query_one("SELECT count(*) FROM kept", &[])?.try_get(0)
    })
    .unwrap();
    assert_eq!(n, 2, "restart() keeps data too");

    // Drop stops the server and removes its files.
    let data = std::path::PathBuf::from(
        with_client(&url, |c| {
            c.query_one("SHOW data_directory", &[])?
                .try_get::<_, String>(0)
        })
        .unwrap(),
    );
    assert!(data.starts_with("/tmp"), "{data:?}");
    drop(cluster);
    assert!(!data.exists(), "cluster directory left behind: {data:?}");
    let after = with_client(&url, |c| c.batch_execute("SELECT 1"));
    assert!(after.is_err(), "server still up after drop");
}
