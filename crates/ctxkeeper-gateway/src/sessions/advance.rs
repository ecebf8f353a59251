//! Bringing a session up to a request's messages: what is new is ingested, an early
//! departure from the stored conversation forks, a replaced newest message is swapped in, a
//! history the client compacted itself continues the session
//! ([`super::client_compaction`]).

use std::sync::Arc;

use ctxkeeper_core::engine::{ContextState, Event};
use ctxkeeper_core::model::{Role, ToolSpec};
use ctxkeeper_llm::Summarizer;
use ctxkeeper_store::SessionKey;
use tokio::sync::broadcast;

use super::client_compaction;
use super::events::{GatewayEvent, engine_event};
use super::prepare::{Collected, LatePreparation};
use super::slot::{Live, Outbox, Slot};
use super::{Incoming, SessionError, Sessions, Step, Ticket};
use crate::identity::{self, common_prefix};

/// What bringing a session up to a request's messages came to.
#[derive(Debug)]
pub(super) enum Advance {
    Step(Step),
    /// The request's conversation diverged from the stored one before its newest message:
    /// it belongs in a session of its own.
    Fork(SessionKey),
}

/// How many forks deep a request may follow (each fork of a fork is one more): past it the
/// session's context is rebuilt from the client's messages instead.
pub(super) const MAX_FORK_DEPTH: usize = 16;

impl Sessions {
    /// Loads the session and brings its context up to the client's messages
    /// ([`Self::advance`]). A failure leaves the slot to be reloaded: the manager may hold
    /// messages that were never saved.
    pub(super) async fn reconcile(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &Incoming,
        tools: &[ToolSpec],
        outbox: &mut Outbox,
        may_fork: bool,
    ) -> Result<Advance, SessionError> {
        self.ensure_loaded(key, slot).await?;
        let advanced = self
            .advance(key, slot, incoming, tools, outbox, may_fork)
            .await;
        if advanced.is_err() {
            slot.loaded = false;
        }
        advanced
    }

    /// Brings the context up to the client's messages and prepares; marks the slot unsaved
    /// when the context changed. A history that diverged from the stored one:
    ///
    /// - with a summary the client wrote of its own history (Codex's checkpoint compaction,
    ///   Claude Code's compact): the session goes on from the client's new history, the
    ///   capsule carried over;
    /// - in its newest stored message only (an edited or retried last turn): that message
    ///   is replaced, and the stored compaction stands;
    /// - earlier: the conversation is another one (or a rewrite of this one) and goes to a
    ///   fork of its own ([`Advance::Fork`]), so nothing rewrites this session's log;
    /// - earlier, where no fork is allowed: the context is rebuilt from the client's messages.
    pub(super) async fn advance(
        &self,
        key: &SessionKey,
        slot: &mut Slot,
        incoming: &Incoming,
        tools: &[ToolSpec],
        outbox: &mut Outbox,
        may_fork: bool,
    ) -> Result<Advance, SessionError> {
        let common = common_prefix(&slot.client.hashes, &incoming.hashes);
        let stored = slot.client.hashes.len();
        let mut diverged = false;
        if common < stored {
            if let Some(summary_at) = client_compaction::client_summary_after(incoming, common) {
                // The client compacted its own history: the same conversation goes on.
                let capsule_kept = client_compaction::restart_from_client(slot, incoming, common);
                outbox.client_compactions += 1;
                outbox.announce(&GatewayEvent::ClientCompactionContinued {
                    common_prefix: common,
                    summary_at,
                    stored_messages: stored,
                    received_messages: incoming.hashes.len(),
                    capsule_kept,
                });
            } else if common + 1 == stored
                && !Self::opening_only(key, incoming, common)
                && Self::drop_newest(slot)
            {
                slot.client.hashes.truncate(common);
                slot.unsaved = true;
                outbox.announce(&GatewayEvent::NewestMessageReplaced { position: common });
            } else if may_fork {
                let end = (common + 1).min(incoming.hashes.len());
                let fork = identity::fork_session(key.session(), &incoming.hashes[..end]);
                let fork = SessionKey::new(key.tenant(), key.user(), key.agent(), fork)?;
                return Ok(Advance::Fork(fork));
            } else {
                diverged = true;
                outbox.divergences += 1;
                outbox.announce(&GatewayEvent::HistoryDiverged {
                    common_prefix: common,
                    stored_messages: stored,
                    received_messages: incoming.hashes.len(),
                });
                // Follow the client: rebuild the context from its messages.
                slot.live = None;
                slot.state = Some(ContextState::default());
                slot.client.hashes.clear();
                slot.client.verbatim = true;
            }
        }
        self.ensure_live(key, slot, incoming, tools)?;
        let start = slot.client.hashes.len();
        let summarizer =
            self.waited(self.step_summarizer(incoming.route.as_ref(), slot.last_forwarded.clone()));
        let Some(live) = slot.live.as_mut() else {
            return Err(SessionError::Corrupt("no context manager".into()));
        };
        let pinned = incoming
            .pin_latest_user
            .then(|| {
                incoming
                    .messages
                    .iter()
                    .rposition(|m| m.role == Role::User && !m.has_tool_results())
            })
            .flatten()
            .filter(|index| *index >= start);
        for (index, message) in incoming.messages.iter().enumerate().skip(start) {
            if Some(index) == pinned {
                live.manager.ingest_pinned(message.clone());
            } else {
                live.manager.ingest(message.clone()).await?;
            }
        }
        // The step's summarizer (with the caller's credentials) is an argument: the manager
        // never holds it, so a request cancelled during the summary leaves nothing behind.
        live.manager.focus_next(incoming.focus.clone());
        let summarizer = match self.collect_preparation(slot).await {
            Collected::Late(waited) => Arc::new(LatePreparation {
                summarizer: summarizer.name().to_string(),
                waited,
            }) as Arc<dyn Summarizer>,
            Collected::Nothing | Collected::Taken => summarizer,
        };
        let Some(live) = slot.live.as_mut() else {
            return Err(SessionError::Corrupt("no context manager".into()));
        };
        let mut prepared = live
            .manager
            .prepare_counted_with(summarizer.as_ref())
            .await?;
        let changed = Self::drain(live, outbox);
        slot.client.hashes.clone_from(&incoming.hashes);
        if changed || prepared.compacted {
            slot.client.verbatim = false;
        }
        let verbatim = slot.client.verbatim
            && prepared.budget_notice.is_none()
            && live.manager.state().entries.len() == incoming.messages.len();
        if !(verbatim && incoming.forwards_verbatim) {
            prepared.messages = live
                .manager
                .request_messages(prepared.budget_notice.as_deref());
        }
        if start < incoming.messages.len() || diverged || prepared.compacted || changed {
            slot.unsaved = true;
        }
        Ok(Advance::Step(Step {
            prepared,
            verbatim,
            diverged,
            ticket: Ticket(slot.generation),
            key: key.clone(),
        }))
    }

    /// Whether a session derived from its conversation's opening (`auto-…`: the model, the
    /// instructions and the first user message name it) and the request share nothing beyond
    /// that opening: the request may be another agent's first, with the same opening, and is
    /// no replacement of this conversation's newest message. A session named by a header
    /// belongs to one client and keeps the replacement.
    pub(super) fn opening_only(key: &SessionKey, incoming: &Incoming, common: usize) -> bool {
        if !key.session().starts_with(identity::DERIVED_PREFIX) {
            return false;
        }
        let opening = incoming
            .messages
            .iter()
            .position(|m| m.role == Role::User)
            .map_or(0, |first| first + 1);
        common <= opening
    }

    /// Removes the newest client message from the context when it is still there as the
    /// client sent it (the last entry, not rewritten by the engine); false when it is not.
    pub(super) fn drop_newest(slot: &mut Slot) -> bool {
        let Some(&newest) = slot.client.hashes.last() else {
            return false;
        };
        let mut state = slot.take_state();
        let found = state
            .entries
            .last()
            .is_some_and(|e| !e.meta.synthetic && identity::message_hash(&e.message) == newest);
        if found {
            state.pop_newest();
        }
        slot.state = Some(state);
        found
    }

    /// Moves the manager's events into `outbox`; returns whether the managed context stopped
    /// being the client's messages verbatim.
    pub(super) fn drain(live: &mut Live, outbox: &mut Outbox) -> bool {
        let mut changed = false;
        loop {
            match live.events.try_recv() {
                Ok(event) => {
                    match &event {
                        Event::ContextCompactionEnd {
                            tokens_before,
                            tokens_after,
                            summary_degraded,
                            ..
                        }
                        | Event::Compaction {
                            tokens_before,
                            tokens_after,
                            summary_degraded,
                            ..
                        } => {
                            changed = true;
                            outbox.compactions += 1;
                            outbox.summaries_degraded += u64::from(*summary_degraded);
                            outbox.tokens_saved += tokens_before.saturating_sub(*tokens_after);
                        }
                        Event::ToolResultTruncated {
                            tokens_before,
                            tokens_after,
                            ..
                        } => {
                            changed = true;
                            outbox.tokens_saved += tokens_before.saturating_sub(*tokens_after);
                        }
                        Event::OverflowRecovered { .. } => {
                            outbox.overflow_recoveries += 1;
                        }
                        Event::SummaryFailed { .. } => outbox.summaries_failed += 1,
                        // An image over the policy's limit left the context for data/.
                        Event::ContentOffloaded { kind, .. } if kind == "data" => changed = true,
                        _ => {}
                    }
                    outbox.events.push(engine_event(&event));
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => changed = true,
                Err(_) => return changed,
            }
        }
    }
}
