//! Retention: sessions idle past an age are removed, and with them what the workspace
//! archived for them (`sessions/<session>/`), so a clean-up leaves no folder behind.
//!
//! `ctxkeeper sessions gc` and the gateway's hourly sweep both go through
//! [`expire_sessions`].
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::time::Duration;
//! use ctxkeeper_core::model::Message;
//! use ctxkeeper_store::archive::Offloader;
//! use ctxkeeper_store::retention::expire_sessions;
//! use ctxkeeper_store::{LocalWorkspace, Retention, SessionKey, SessionStore, open_store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = open_store("memory://").await?;
//! let workspace = LocalWorkspace::new(dir.path())?;
//! let key = SessionKey::simple("s1")?;
//! store.append(&key, &[Message::user("hello")]).await?;
//! workspace.offload_tool_result(&key.archive_scope(), "c1", "output").await?;
//! std::thread::sleep(Duration::from_millis(5));
//! let retention = Retention { max_age: Duration::from_millis(1) };
//! let expired = expire_sessions(store.as_ref(), Some("default"), retention, Some(&workspace)).await?;
//! assert_eq!((expired.sessions, expired.archives), (1, 1));
//! assert!(!dir.path().join("sessions/s1").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::HashSet;

use crate::archive::ArchiveScope;
use crate::session::{Retention, SessionFilter, SessionInfo, SessionStore};
use crate::{LocalWorkspace, StoreError};

/// What a retention clean-up removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Sessions removed from the store.
    pub sessions: u64,
    /// Their archive directories removed from the workspace.
    pub archives: u64,
}

/// Removes the sessions of `tenant` (of every tenant with `None`) not updated within
/// `retention`, and, given the workspace they archived into, each removed session's directory
/// there. A directory another session still uses (the same tenant and id under another user
/// or agent: the archive is per tenant and session id) is kept.
pub async fn expire_sessions(
    store: &dyn SessionStore,
    tenant: Option<&str>,
    retention: Retention,
    workspace: Option<&LocalWorkspace>,
) -> Result<Expired, StoreError> {
    // Listed before and after the purge: a session that was there and is gone is one the
    // purge removed (whatever clock the store judged its age by).
    let before = match workspace {
        Some(_) => sessions_of(store, tenant).await?,
        None => Vec::new(),
    };
    let sessions = store.cleanup(tenant, retention).await?;
    let mut archives = 0;
    if let Some(workspace) = workspace
        && sessions > 0
    {
        let remaining: HashSet<ArchiveScope> = sessions_of(store, tenant)
            .await?
            .iter()
            .map(|info| info.key.archive_scope())
            .collect();
        let gone: HashSet<ArchiveScope> = before
            .iter()
            .map(|info| info.key.archive_scope())
            .filter(|scope| !remaining.contains(scope))
            .collect();
        for scope in gone {
            if workspace.remove_session(&scope).await? {
                archives += 1;
            }
        }
    }
    Ok(Expired { sessions, archives })
}

/// The sessions of `tenant`, or of every tenant the store can name.
async fn sessions_of(
    store: &dyn SessionStore,
    tenant: Option<&str>,
) -> Result<Vec<SessionInfo>, StoreError> {
    let tenants: Vec<String> = match tenant {
        Some(tenant) => vec![tenant.to_string()],
        None => store
            .tenants()
            .await?
            .into_iter()
            .map(|info| info.tenant)
            .collect(),
    };
    let mut sessions = Vec::new();
    for tenant in tenants {
        sessions.extend(store.list(&SessionFilter::tenant(tenant)).await?);
    }
    Ok(sessions)
}
