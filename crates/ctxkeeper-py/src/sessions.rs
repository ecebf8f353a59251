//! `Sessions`: a session store opened by URL, as `ctxkeeper sessions --store URL` opens it.

use std::sync::Arc;

use ctxkeeper::store::{
    HistoryPage, SearchQuery, SessionFilter, SessionInfo, SessionKey, SessionStore, StoreError,
};
use pyo3::prelude::*;

use crate::errors;
use crate::runtime;

/// A session store: list, read, search and delete sessions (resume one with
/// `ContextManager(store=URL, session=ID)`).
#[pyclass(module = "ctxkeeper_engine._native", name = "Sessions", frozen)]
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    url: String,
    tenant: String,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("url", &ctxkeeper::store::redact(&self.url))
            .field("tenant", &self.tenant)
            .finish()
    }
}

fn py_value<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, value)
        .map_err(|e| errors::raise(errors::Kind::Base, e.to_string(), &[]))
}

impl Sessions {
    fn filter(&self, user: Option<String>, agent: Option<String>) -> SessionFilter {
        SessionFilter {
            tenant: self.tenant.clone(),
            user,
            agent,
        }
    }

    /// The key of `session` in the tenant: the one with that id when only one user and agent
    /// has it, else the default user's and agent's (the CLI's rule).
    async fn resolve(
        &self,
        session: &str,
        user: Option<String>,
        agent: Option<String>,
    ) -> Result<SessionKey, StoreError> {
        if let (Some(user), Some(agent)) = (&user, &agent) {
            return SessionKey::new(self.tenant.as_str(), user.as_str(), agent.as_str(), session);
        }
        let found: Vec<SessionInfo> = self
            .store
            .list(&self.filter(user.clone(), agent.clone()))
            .await?
            .into_iter()
            .filter(|info| info.key.session() == session)
            .collect();
        match found.as_slice() {
            [one] => Ok(one.key.clone()),
            [] => SessionKey::new(
                self.tenant.as_str(),
                user.as_deref().unwrap_or(SessionKey::DEFAULT),
                agent.as_deref().unwrap_or(SessionKey::DEFAULT),
                session,
            ),
            several => Err(StoreError::InvalidInput(format!(
                "session {session:?} exists more than once; pick one with user= and agent=: {}",
                several
                    .iter()
                    .map(|i| i.key.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

#[pymethods]
impl Sessions {
    /// Opens the store at `store` (sqlite://PATH, file://DIR, postgres://…, mysql://…,
    /// redis://…, memory://) for `tenant`.
    #[new]
    #[pyo3(signature = (store, *, tenant = "default"))]
    fn new(py: Python<'_>, store: String, tenant: &str) -> PyResult<Sessions> {
        let url = store.clone();
        let opened =
            runtime::block_on(py, async move { ctxkeeper::store::open_store(&url).await })?;
        let opened = opened.map_err(|err| {
            let top = errors::raise(
                errors::Kind::Store,
                format!(
                    "cannot open the store {}: {err}",
                    ctxkeeper::store::redact(&store)
                ),
                &[],
            );
            top.set_cause(py, Some(errors::store(&err)));
            top
        })?;
        Ok(Sessions {
            store: opened,
            url: store,
            tenant: tenant.to_string(),
        })
    }

    /// The tenant's sessions, most recently updated first, as dicts (`key`, `version`,
    /// `log_len`, `created_at_ms`, `updated_at_ms`).
    #[pyo3(signature = (*, user = None, agent = None))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        agent: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let filter = self.filter(user, agent);
        let store = self.store.clone();
        let found = runtime::block_on(py, async move { store.list(&filter).await })?
            .map_err(|e| errors::store(&e))?;
        py_value(py, &found)
    }

    /// The last `last` entries of a session's log (before sequence number `before`), oldest
    /// first, as dicts (`seq`, `at_ms`, `message`).
    #[pyo3(signature = (session, *, last = 20, before = None, user = None, agent = None))]
    fn history<'py>(
        &self,
        py: Python<'py>,
        session: &str,
        last: usize,
        before: Option<u64>,
        user: Option<String>,
        agent: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entries = runtime::block_on(py, async {
            let key = self.resolve(session, user, agent).await?;
            self.store
                .history(
                    &key,
                    HistoryPage {
                        last,
                        before_seq: before,
                    },
                )
                .await
        })?
        .map_err(|e| errors::store(&e))?;
        py_value(py, &entries)
    }

    /// Ranked full-text search over the tenant's session logs (or one session's), best
    /// first, as dicts (`key`, `seq`, `score`, `snippet`).
    #[pyo3(signature = (query, *, session = None, limit = 20))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        session: Option<String>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let hits = runtime::block_on(py, async {
            let mut search = match &session {
                Some(session) => {
                    SearchQuery::session(self.resolve(session, None, None).await?, query)
                }
                None => SearchQuery::tenant(self.tenant.as_str(), query),
            };
            search.limit = limit;
            self.store.search(&search).await
        })?
        .map_err(|e| errors::store(&e))?;
        py_value(py, &hits)
    }

    /// Removes a session's state and log; False when there was nothing to remove.
    #[pyo3(signature = (session, *, user = None, agent = None))]
    fn delete(
        &self,
        py: Python<'_>,
        session: &str,
        user: Option<String>,
        agent: Option<String>,
    ) -> PyResult<bool> {
        runtime::block_on(py, async {
            let key = self.resolve(session, user, agent).await?;
            self.store.delete(&key).await
        })?
        .map_err(|e| errors::store(&e))
    }

    /// The store's URL (password redacted).
    #[getter]
    fn url(&self) -> String {
        ctxkeeper::store::redact(&self.url)
    }

    /// The tenant.
    #[getter]
    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn __repr__(&self) -> String {
        format!(
            "Sessions({:?}, tenant={:?})",
            ctxkeeper::store::redact(&self.url),
            self.tenant
        )
    }
}
