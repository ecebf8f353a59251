//! ctxkeeper-store: where sessions and archived context live.
//!
//! - [`archive`]: the [`Offloader`] contract — content leaves the context
//!   only after it is durably written here, and comes back through read / grep / glob / list.
//!   Implementations: [`LocalWorkspace`] (the `000` directory layout), an object-store archive
//!   (feature `object-store`) and an archive inside the SQL stores.
//! - [`session`]: the [`SessionStore`] contract — versioned agent state with compare-and-swap,
//!   an append-only session log, list / history / search, the tenants that hold sessions and
//!   retention clean-up — with
//!   backends selected by URL through [`open_store`]: `memory://`, `file://DIR`,
//!   `sqlite://PATH` (the embedded default), `redis://…`, `postgres://…`, `mysql://…`.
//! - [`state`]: the persisted [`AgentState`] and the [`SessionKey`] that names it.
//! - [`generations`]: how every backend stores a state — a head and context generations, so
//!   a step that only appended writes O(new messages) ([`ContextWrite`]).
//! - [`restore`]: what of a stored state goes back into the context on the next call.
//! - [`memory`]: long-term memory files (`MEMORY.md`, `memory/YYYY-MM-DD.md`).
//! - [`events`]: session events across replicas ([`EventBus`], opened from the store's URL
//!   by [`open_event_bus`]): Redis pub/sub, PostgreSQL `LISTEN`/`NOTIFY`, or in-process.
//!
//! Cargo features: `sqlite` (default), `postgres`, `mysql`, `redis`, `object-store`
//! (in-memory and local file system), `object-store-cloud` (S3, GCS, Azure), `tls` (rustls for
//! `sslmode=…` and `rediss://`). Every backend runs the same conformance suites
//! (`tests/common/`); the server backends read their URLs from `CTXKEEPER_TEST_POSTGRES_URL`,
//! `CTXKEEPER_TEST_MYSQL_URL` and `CTXKEEPER_TEST_REDIS_URL` and print `SKIP` when unset.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::{open_store, AgentState, SessionKey};
//!
//! let store = open_store("memory://").await?;
//! let key = SessionKey::new("acme", "alice", "support-bot", "s1")?;
//! let mut state = AgentState::new();
//! state.context.push(Message::user("where is my parcel?"));
//! let version = store.save(&key, &state, None).await?;
//! store.append(&key, &state.context).await?;
//! let loaded = store.load(&key).await?.expect("saved above");
//! assert_eq!((loaded.version, loaded.state.context.len()), (version, 1));
//! # Ok::<(), ctxkeeper_store::StoreError>(())
//! # }).unwrap();
//! ```

pub mod archive;
mod blob;
mod error;
pub mod events;
pub mod file_store;
mod fsutil;
pub mod generations;
mod idle;
pub mod memory;
pub mod memory_store;
#[cfg(feature = "object-store")]
pub mod object_archive;
mod open;
#[cfg(feature = "redis")]
pub mod redis_store;
pub mod restore;
pub mod retention;
pub mod session;
#[cfg(feature = "sql")]
pub mod sql;
pub mod state;
mod text;
mod time;
pub mod workspace;

pub use archive::{ArchiveRef, ArchiveScope, Offloader};
pub use error::StoreError;
pub use events::{EventBus, open_event_bus};
pub use generations::ContextWrite;
pub use idle::on_thread_idle;
pub use open::{check_store_url, install_tls_provider, is_sql_url, open_archive, open_store};
pub use session::{
    AppendOutcome, Commit, Committed, HistoryPage, LogEntry, Retention, SearchHit, SearchQuery,
    SearchScope, SessionFilter, SessionInfo, SessionStore, TenantInfo, Versioned,
};
pub use state::{AgentState, SessionKey};
pub use workspace::LocalWorkspace;

/// A Unix time in milliseconds as `YYYY-MM-DD HH:MM:SS UTC`, for reports.
pub fn format_timestamp(ms: i64) -> String {
    let seconds = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{} {:02}:{:02}:{:02} UTC",
        time::date_string(ms),
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// A URL with its password replaced, for error messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}{path}")
            } else {
                url.to_string()
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("/tmp/x"), "/tmp/x");
    }

    #[test]
    fn timestamps_format_in_utc() {
        assert_eq!(
            format_timestamp(1_795_000_000_000),
            "2026-11-18 11:06:40 UTC"
        );
    }
}
