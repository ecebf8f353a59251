//! Saving a session: one compare-and-swapped write of the state with the step's new log
//! entries, and what a lost swap means. A step that only appended writes only what it
//! appended (the store's current generation continues); a step that rewrote the context
//! writes it as a new generation.

use ctxkeeper::snapshot::{self, ClientRecord, Snapshot};
use ctxkeeper_core::model::Message;
use ctxkeeper_store::{Commit, SessionKey, StoreError};

use super::slot::Slot;
use super::{MAX_CAS_RETRIES, SessionError, Sessions};
use crate::metrics::Metrics;

impl Sessions {
    /// Loads the slot from the store unless it is loaded.
    pub(super) async fn ensure_loaded(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
    ) -> Result<(), SessionError> {
        if slot.loaded {
            return Ok(());
        }
        let stored = self.load_snapshot(key).await?;
        Self::install(slot, stored);
        Ok(())
    }

    /// Loads a session through the codec. A state written without a client record (by a face
    /// that did not fingerprint what it stored) gets one from the session log, which holds the
    /// client's messages: the next request then continues it instead of ingesting its whole
    /// history again.
    pub(super) async fn load_snapshot(
        &self,
        key: &SessionKey,
    ) -> Result<Option<(Snapshot, u64)>, SessionError> {
        let Some((mut snapshot, version)) = snapshot::load(self.store.as_ref(), key).await? else {
            return Ok(None);
        };
        if snapshot.client.hashes.is_empty() && !snapshot.context.entries.is_empty() {
            let logged = self.read_log(key).await?;
            let verbatim = snapshot.context.entries.len() == logged.len()
                && snapshot
                    .context
                    .entries
                    .iter()
                    .zip(&logged)
                    .all(|(entry, message)| entry.message == *message);
            snapshot.client = ClientRecord {
                verbatim,
                ..ClientRecord::of_messages(&logged)
            };
            // The store holds no fingerprints: the next save writes them with a generation.
            snapshot.stored = None;
        }
        Ok(Some((snapshot, version)))
    }

    /// The whole session log, oldest first.
    pub(super) async fn read_log(&self, key: &SessionKey) -> Result<Vec<Message>, StoreError> {
        let log = self.store.whole_log(key).await?;
        Ok(log.into_iter().map(|entry| entry.message).collect())
    }

    /// Saves the slot (compare-and-swap on the version it was loaded at) with `log` appended
    /// to the session log in the same commit, where the store commits atomically (every
    /// built-in one does); a store that cannot saves, then appends.
    pub(super) async fn persist(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        log: &[Message],
    ) -> Result<(), StoreError> {
        let incremental = self.store.saves_incrementally();
        let (state, write) = Self::state_to_store(slot, incremental);
        let committed = self
            .store
            .commit(
                key,
                Commit {
                    state: &state,
                    write,
                    expected: slot.version,
                    messages: log,
                },
            )
            .await?;
        slot.version = Some(committed.version);
        slot.stored_shape = incremental.then(|| Self::shape_of(slot));
        Ok(())
    }

    /// Judges a save: `Ok(true)` when it committed, `Ok(false)` when the caller reloads and
    /// tries again (a lost compare-and-swap within the retry budget), and the error
    /// otherwise. Every outcome but success leaves the slot to be reloaded.
    pub(super) fn settle(
        &self,
        slot: &mut Slot,
        saved: Result<(), StoreError>,
        conflicts: &mut usize,
    ) -> Result<bool, SessionError> {
        let retry = match saved {
            Ok(()) => return Ok(true),
            Err(err) if err.is_conflict() && *conflicts < MAX_CAS_RETRIES => {
                *conflicts += 1;
                Metrics::add(&self.metrics.store_conflicts, 1);
                Ok(false)
            }
            Err(err) => Err(err.into()),
        };
        slot.loaded = false;
        retry
    }

    /// Brings the slot up to the stored session for a reader. Another gateway may have moved
    /// the session on, so it reloads when the stored version is not the one in memory; a
    /// current warm session keeps its manager, and with it the usage calibration its next
    /// request counts with.
    pub(super) async fn refresh(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
    ) -> Result<(), SessionError> {
        let stored = self.load_snapshot(key).await?;
        let version = stored.as_ref().map(|(_, version)| *version);
        if !slot.loaded || slot.version.is_none() || slot.version != version {
            Self::install(slot, stored);
        }
        Ok(())
    }
}
