//! What the admin API reads and changes in a session: statistics, its policy overrides,
//! clearing its context, rebuilding an unreadable one from its log.

use ctxkeeper::snapshot::{self, ClientRecord, Snapshot};
use ctxkeeper_core::engine::{ConfigError, ContextState, PolicyOverlay};
use ctxkeeper_core::orders::{StandingOrder, StandingOrders};
use ctxkeeper_store::SessionKey;
use serde::Serialize;
use serde_json::Value;

use super::slot::Slot;
use super::{POLICY_OVERRIDES, SessionError, Sessions};

/// Statistics of one session's context (admin API).
#[derive(Debug, Clone, Serialize)]
pub struct ContextStats {
    pub version: Option<u64>,
    pub messages: usize,
    pub client_messages: usize,
    pub approx_tokens: u64,
    pub compactions: u32,
    pub appended: u64,
    pub has_summary: bool,
    pub archived_refs: usize,
    pub learned_window: Option<u64>,
    pub verbatim: bool,
    pub policy_overrides: Option<String>,
}

/// Why a policy patch failed.
#[derive(Debug)]
pub enum PatchError {
    /// The merged overrides do not make a valid policy.
    Invalid(String),
    Session(SessionError),
}

impl Sessions {
    /// Statistics of a session's context, `None` if it was never saved.
    pub async fn stats(&self, key: &SessionKey) -> Result<Option<ContextStats>, SessionError> {
        self.read(key, |slot| {
            // A copy: counting caches token totals, and the running manager's state is its own.
            let mut state = slot.state_ref().cloned()?;
            Some(ContextStats {
                version: slot.version,
                messages: state.entries.len(),
                client_messages: slot.client.hashes.len(),
                approx_tokens: state.approx_tokens(),
                compactions: state.compactions,
                appended: state.appended,
                has_summary: state.summary.is_some(),
                archived_refs: state
                    .entries
                    .iter()
                    .map(|e| e.meta.archived.len() + e.meta.result_refs.len())
                    .sum(),
                learned_window: slot.client.learned_window,
                verbatim: slot.client.verbatim,
                policy_overrides: slot.overrides(),
            })
        })
        .await
    }

    /// The session's standing orders (see `ctxkeeper_core::orders`), none before its first
    /// compaction; `None` for an unknown session.
    pub async fn orders(&self, key: &SessionKey) -> Result<Option<StandingOrders>, SessionError> {
        self.read(key, |slot| {
            Some(
                slot.state_ref()
                    .and_then(ContextState::capsule)
                    .map(|c| c.orders.clone())
                    .unwrap_or_default(),
            )
        })
        .await
    }

    /// An operator's edit of one standing order (see `StandingOrders::edit`), saved with the
    /// session: `None` for an unknown session, `Some(Err)` for an order it does not have.
    pub async fn edit_order(
        &self,
        key: &SessionKey,
        index: usize,
        pinned: Option<bool>,
        current: Option<bool>,
    ) -> Result<Option<Result<StandingOrder, String>>, SessionError> {
        let mut outcome = None;
        let found = self
            .update(key, |slot| {
                let edited = match slot.state.as_mut().and_then(ContextState::capsule_mut) {
                    Some(capsule) => capsule.orders.edit(index, pinned, current).cloned(),
                    None => Err("the session has no standing orders yet (they are read at its first compaction)".to_string()),
                };
                if edited.is_ok() {
                    // The edit rewrites an entry already stored, which an incremental save
                    // (new entries only) would not carry: write the whole context.
                    slot.stored_shape = None;
                }
                outcome = Some(edited);
                Ok(())
            })
            .await?;
        Ok(if found { outcome } else { None })
    }

    /// Empties a session's context (its log stays); the next request rebuilds it from the
    /// client's messages. Returns false for an unknown session.
    pub async fn clear(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.update(key, |slot| {
            slot.live = None;
            slot.state = Some(ContextState::default());
            slot.client.hashes.clear();
            slot.client.verbatim = true;
            slot.client.learned_window = None;
            Ok(())
        })
        .await
    }

    /// The session's policy overrides (TOML), `Ok(None)` when there are none, `Err` for an
    /// unknown session.
    pub async fn overrides(
        &self,
        key: &SessionKey,
    ) -> Result<Option<Option<String>>, SessionError> {
        self.read(key, |slot| Some(slot.overrides())).await
    }

    /// What `read` takes from a stored session as it is now (reloaded when another replica
    /// changed it), `None` for a session never saved.
    async fn read<T>(
        &self,
        key: &SessionKey,
        read: impl FnOnce(&Slot) -> Option<T>,
    ) -> Result<Option<T>, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        self.refresh(key, &mut slot).await?;
        if slot.version.is_none() {
            return Ok(None);
        }
        Ok(read(&slot))
    }

    /// Merges a TOML fragment into the session's policy overrides after checking the result
    /// against the gateway's policy; returns the merged fragment, or `None` for an unknown
    /// session.
    pub async fn patch_overrides(
        &self,
        key: &SessionKey,
        patch: toml::Table,
    ) -> Result<Option<String>, PatchError> {
        let mut merged_text = None;
        let base = self.policy.clone();
        let found = self
            .update(key, |slot| {
                let invalid = |e: ConfigError| SessionError::Context(ctxkeeper::Error::Config(e.0));
                // Key by key at every depth: a second PATCH of `[overflow] shrink_factor`
                // keeps the `[overflow] max_attempts` of the first.
                let mut merged = match slot.overrides() {
                    Some(text) => PolicyOverlay::parse(&text).map_err(invalid)?,
                    None => PolicyOverlay::default(),
                };
                merged.merge(&PolicyOverlay::from_table(patch.clone()).map_err(invalid)?);
                let text = merged.to_toml_string();
                merged.apply(&base).map_err(invalid)?;
                slot.extensions
                    .insert(POLICY_OVERRIDES.into(), Value::String(text.clone()));
                merged_text = Some(text);
                Ok(())
            })
            .await
            .map_err(|err| match err {
                SessionError::Context(ctxkeeper::Error::Config(message)) => {
                    PatchError::Invalid(message)
                }
                other => PatchError::Session(other),
            })?;
        Ok(if found { merged_text } else { None })
    }

    /// Applies `change` to a stored session and saves it (compare-and-swap, retried).
    pub(super) async fn update(
        &self,
        key: &SessionKey,
        mut change: impl FnMut(&mut Slot) -> Result<(), SessionError>,
    ) -> Result<bool, SessionError> {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let mut conflicts = 0;
        loop {
            slot.loaded = false;
            self.ensure_loaded(key, &mut slot).await?;
            if slot.version.is_none() {
                return Ok(false);
            }
            change(&mut slot)?;
            let saved = self.persist(key, &mut slot, &[]).await;
            if self.settle(&mut slot, saved, &mut conflicts)? {
                return Ok(true);
            }
        }
    }

    /// Rebuilds a session's context from its log, over whatever the stored state holds (an
    /// unreadable one included): the context becomes the logged messages and the next request
    /// continues from them. Returns false for a session with no log.
    pub async fn rebuild(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let messages = self.read_log(key).await?;
        if messages.is_empty() {
            return Ok(false);
        }
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        let version = self.store.load(key).await?.map(|stored| stored.version);
        let mut context = ContextState::from_messages(messages.clone());
        context.appended = messages.len() as u64;
        let rebuilt = Snapshot::new(context).with_client(ClientRecord::of_messages(&messages));
        snapshot::save(self.store.as_ref(), key, &rebuilt, version, &[]).await?;
        slot.loaded = false;
        tracing::warn!(session = %key, messages = messages.len(), "session rebuilt from its log");
        Ok(true)
    }
}
