//! Every session store backend runs the shared conformance suite. Backends that need a server
//! read its URL from an environment variable and report `SKIP` loudly when it is absent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ctxkeeper_store::{SessionStore, open_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_conformance() {
    let store = open_store("memory://").await.unwrap();
    common::generations_suite::run_all(&*store).await;
    common::store_suite::run_all(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let store = open_store(&url).await.unwrap();
    common::generations_suite::run_all(&*store).await;
    let root = dir.path().to_path_buf();
    common::generations_suite::whole_state_records(&*store, |key, state| async move {
        // The layout a build before generations wrote: the whole state in state.json.
        let context = root
            .join("agents")
            .join(key.agent())
            .join("context")
            .join(key.session());
        std::fs::create_dir_all(&context).unwrap();
        let head = serde_json::json!({"key": key, "created_at_ms": 1});
        std::fs::write(context.join("key.json"), head.to_string()).unwrap();
        let body = format!("{{\"version\":1,\"saved_at_ms\":1,\"state\":{state}}}");
        std::fs::write(context.join("state.json"), body).unwrap();
    })
    .await;
    common::store_suite::run_all(store).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join("nested/sessions.db").display()
    );
    let store = open_store(&url).await.unwrap();
    common::generations_suite::run_all(&*store).await;
    #[cfg(feature = "sql")]
    common::generations_suite::whole_state_records(&*store, |key, state| {
        sql_whole(url, key, state)
    })
    .await;
    common::store_suite::run_all(store).await;
}

/// Stores a state whole, as the SQL stores did before generations: the session row and the
/// state row, with no generation.
#[cfg(feature = "sql")]
async fn sql_whole(url: String, key: ctxkeeper_store::SessionKey, state: String) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let postgres = url.starts_with("postgres");
    let q = |text: &str| {
        if !postgres {
            return text.to_string();
        }
        let mut n = 0;
        text.chars()
            .map(|c| {
                if c == '?' {
                    n += 1;
                    format!("${n}")
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
    };
    let sessions = q(
        "INSERT INTO ctxkeeper_sessions (tenant, user_id, agent, session, version, log_len, created_at, updated_at) VALUES (?, ?, ?, ?, 1, 0, 1, 1)",
    );
    let states = q(
        "INSERT INTO ctxkeeper_states (tenant, user_id, agent, session, state) VALUES (?, ?, ?, ?, ?)",
    );
    let mut conn = pool.acquire().await.unwrap();
    for (text, with_state) in [(sessions, false), (states, true)] {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(text))
            .bind(key.tenant().to_string())
            .bind(key.user().to_string())
            .bind(key.agent().to_string())
            .bind(key.session().to_string());
        if with_state {
            query = query.bind(state.clone());
        }
        query.execute(&mut *conn).await.unwrap();
    }
}

/// Opens a server-backed store, or reports SKIP (outside CI) and returns `None`.
#[allow(dead_code)]
async fn server_store(var: &str, backend: &str, default: &str) -> Option<Arc<dyn SessionStore>> {
    let url = common::service_url(var, backend, default)?;
    match tokio::time::timeout(Duration::from_secs(20), open_store(&url)).await {
        Ok(Ok(store)) => Some(store),
        Ok(Err(err)) => {
            common::unreachable(backend, &err.to_string());
            None
        }
        Err(_) => {
            common::unreachable(backend, "no answer within 20 s");
            None
        }
    }
}

/// The conformance suites on a SQL server's store (a state stored whole by an older build
/// among them), when the server answers.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn sql_conformance(var: &str, backend: &str, default: &str) {
    if let Some(store) = server_store(var, backend, default).await {
        common::generations_suite::run_all(&*store).await;
        let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
        common::generations_suite::whole_state_records(&*store, |key, state| {
            sql_whole(url, key, state)
        })
        .await;
        common::store_suite::run_all(store).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_conformance() {
    sql_conformance(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_conformance() {
    sql_conformance(common::MYSQL_VAR, "mysql", common::MYSQL_DEFAULT).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_conformance() {
    if let Some(store) = server_store(common::REDIS_VAR, "redis", common::REDIS_DEFAULT).await {
        common::generations_suite::run_all(&*store).await;
        let url =
            std::env::var(common::REDIS_VAR).unwrap_or_else(|_| common::REDIS_DEFAULT.to_string());
        common::generations_suite::whole_state_records(&*store, |key, state| async move {
            // The hash a build before generations wrote: the whole state, no generation.
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let name = format!(
                "ctxkeeper:s:{{{}|{}|{}|{}}}:state",
                key.tenant(),
                key.user(),
                key.agent(),
                key.session()
            );
            let _: () = redis::cmd("HSET")
                .arg(name)
                .arg("version")
                .arg(1)
                .arg("state")
                .arg(state)
                .arg("created")
                .arg(1)
                .arg("updated")
                .arg(1)
                .query_async(&mut conn)
                .await
                .unwrap();
        })
        .await;
        common::store_suite::run_all(store).await;
    }
}

#[tokio::test]
async fn unknown_schemes_are_refused() {
    assert!(open_store("ftp://x").await.is_err());
}
