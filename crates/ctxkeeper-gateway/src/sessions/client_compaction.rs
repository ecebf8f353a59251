//! A compaction the client asked for in its provider's shape (an OpenAI Responses
//! `compaction_trigger`, see [`crate::compaction_items`]): the session is compacted as far as
//! its policy goes, without keeping recent rounds verbatim (the client replaces its whole
//! history by what it gets back), and the text standing for that history is returned.

use bytes::Bytes;
use ctxkeeper_core::engine::ContextState;
use ctxkeeper_store::SessionKey;

use super::{Incoming, SessionError, Sessions, Ticket};

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
