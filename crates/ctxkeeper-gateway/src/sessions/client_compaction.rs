//! Compactions the client makes of its own history.
//!
//! - **In its provider's shape** (an OpenAI Responses `compaction_trigger`, see
//!   [`crate::compaction_items`]): the session is compacted as far as its policy goes, without
//!   keeping recent rounds verbatim (the client replaces its whole history by what it gets
//!   back), and the text standing for that history is returned.
//! - **In the conversation itself** (Codex CLI's "CONTEXT CHECKPOINT COMPACTION" call, Claude
//!   Code's compact, see [`ctxkeeper_core::harness`]): the client asks the model for a summary
//!   like any request, then restarts its history from what it keeps plus that summary. The
//!   restarted history departs from the stored one early, which would make it another
//!   conversation (a fork); where it carries a client summary the stored conversation does
//!   not, it is this session's continuation instead ([`client_summary_after`]): the context
//!   follows the client's new history, and the session's capsule (the user's words, the
//!   standing orders, the files, the plan) stays in it, so what the gateway kept survives the
//!   client's compaction as it survives its own.

use bytes::Bytes;
use ctxkeeper_core::engine::ContextState;
use ctxkeeper_core::harness::is_client_summary;
use ctxkeeper_core::model::Role;
use ctxkeeper_store::SessionKey;

use super::slot::Slot;
use super::{Incoming, SessionError, Sessions, Ticket};

/// Where a request's history carries a client summary past the `common` messages it shares
/// with the stored conversation: the client compacted its history, and this request
/// continues the session.
pub(super) fn client_summary_after(incoming: &Incoming, common: usize) -> Option<usize> {
    incoming
        .messages
        .iter()
        .enumerate()
        .skip(common)
        .find(|(_, m)| m.role == Role::User && is_client_summary(&m.text()))
        .map(|(index, _)| index)
}

/// Restarts the slot's context from the client's compacted history: the `common` messages
/// it shares with the stored conversation (its instructions, often its first user message),
/// with the session's capsule after the leading instructions when it has one; the rest of the
/// request is then ingested as new messages. Counts (compactions, the log's length) carry
/// on; the old context stays in the store's earlier generation and in the archive. Returns
/// whether a capsule was carried over.
pub(super) fn restart_from_client(slot: &mut Slot, incoming: &Incoming, common: usize) -> bool {
    let mut old = slot.take_state();
    // A summary prepared for the old context has nothing to summarize in the new one.
    slot.preparations = ctxkeeper::Preparations::default();
    let capsule = old
        .entries
        .iter()
        .position(|entry| entry.meta.capsule.is_some())
        .map(|index| old.entries.remove(index));
    let mut state = ContextState::default();
    for message in &incoming.messages[..common] {
        state.push(message.clone());
    }
    // The shared messages are in the log already: the next one logged continues its count.
    for entry in &mut state.entries {
        entry.meta.log_index = None;
    }
    state.appended = old.appended;
    state.compactions = old.compactions;
    let carried = capsule.is_some();
    if let Some(mut capsule) = capsule {
        capsule.tokens = None;
        capsule.estimated = None;
        let leading = state
            .entries
            .iter()
            .take_while(|entry| entry.message.role.is_instruction())
            .count();
        state.entries.insert(leading, capsule);
    }
    state.invalidate_totals();
    slot.state = Some(state);
    slot.client.hashes = incoming.hashes[..common].to_vec();
    slot.client.verbatim = !carried;
    // The whole context is new: the next save writes a generation.
    slot.stored_shape = None;
    slot.unsaved = true;
    carried
}

/// The policy override of a client-requested compaction: the client keeps nothing of its
/// history but what the returned item stands for, so no round stays verbatim here either.
const CLIENT_COMPACTION_OVERRIDES: &str = "keep_recent_rounds = 0";

impl Sessions {
    /// Compacts the context of step `ticket` for a client that will replace its history by
    /// the returned text (the session's capsule and summary). The step is then committed or
    /// abandoned as any step. `prefix` is the request the step would have forwarded: the
    /// upstream summarizer repeats it, on the provider's prompt cache.
    pub async fn compact_for_client(
        &self,
        key: &SessionKey,
        ticket: Ticket,
        incoming: &Incoming,
        prefix: Option<Bytes>,
    ) -> Result<String, SessionError> {
        let summarizer = self.step_summarizer(incoming.route.as_ref(), prefix);
        let cell = self.slot(key);
        let mut guard = cell.lock().await;
        let slot = &mut *guard;
        let Some(pending) = slot
            .pending
            .as_mut()
            .filter(|pending| pending.generation == ticket.0)
        else {
            return Err(SessionError::Corrupt(
                "a newer request of this session superseded the compaction request".into(),
            ));
        };
        let Some(live) = slot.live.as_mut() else {
            return Err(SessionError::Corrupt("no context manager".into()));
        };
        live.manager
            .compact_to_with(
                summarizer.as_ref(),
                Some(CLIENT_COMPACTION_OVERRIDES),
                None,
                Some(0),
            )
            .await?;
        Self::drain(live, &mut pending.outbox);
        let text = history_text(live.manager.state());
        slot.client.verbatim = false;
        slot.unsaved = true;
        Ok(text)
    }
}

/// What stands for the compacted history: every text of the compacted context after the
/// instructions, in order (the capsule, the summary naming where the originals are archived,
/// and what stayed: the request that opened the current turn).
fn history_text(state: &ContextState) -> String {
    state
        .entries
        .iter()
        .filter(|entry| !entry.message.role.is_instruction())
        .map(|entry| entry.message.text())
        .filter(|text| !text.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}
