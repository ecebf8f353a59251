//! Summaries written in the background, before the trigger: once a committed step leaves the
//! context past a soft threshold (a share of the active trigger), the summary the next
//! compaction needs is asked for off the session's lock, on the step's own summarizer (for
//! the upstream summarizer: the body just forwarded plus the instruction, on the provider's
//! prompt cache). The request that then crosses the trigger applies it without waiting for a
//! model, and keeps every message that arrived meanwhile verbatim (see
//! [`ctxkeeper::SummaryPreparation`]). The written summary comes back to the slot on a channel
//! ([`Sessions::collect_preparation`]): a step that compacts while it is still being written
//! (an agent whose next call comes before the summary) waits for it, at most the summary wait,
//! rather than asking the upstream for the same summary a second time.
//!
//! Nothing is prepared after an answer that ended the agent's turn (text without a tool
//! call, to a request that offered tools: [`super::Answered::ends_turn`]); a chat without
//! tools prepares after every answer, the user's typing time being what hides the call.
//!
//! A preparation that fails (the summarizer's upstream refused it, timed out, answered
//! something else) is not asked again on the next step: each consecutive failure doubles the
//! steps the session waits before the next one (1, 2, 4, … at most
//! [`Backoff::MAX_SKIPPED_STEPS`]), a success starts over. Every failure counts in
//! `ctxkeeper_summaries_failed_total`.

use std::sync::Arc;

use ctxkeeper_core::summary::{Summary, SummaryRequest};
use ctxkeeper_llm::{LlmError, Summarizer};
use tokio::sync::oneshot::error::TryRecvError;

use super::Sessions;
use super::slot::Slot;
use crate::metrics::Metrics;
use crate::summarize::UpstreamRoute;

/// The soft threshold by default: a summary is prepared once the request passes this share of
/// the trigger.
pub const DEFAULT_PREPARE_AT: f64 = 0.75;

/// How long a session waits before preparing a summary again after preparations failed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Consecutive failed preparations.
    failures: u32,
    /// Steps still to skip before the next preparation.
    skip: u32,
}

impl Backoff {
    /// The most steps skipped between two preparations, however many failed.
    pub(crate) const MAX_SKIPPED_STEPS: u32 = 32;

    /// Whether this step may prepare; a step that may not counts down the wait.
    fn allows(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        self.skip = 1u32
            .checked_shl(self.failures - 1)
            .unwrap_or(u32::MAX)
            .min(Self::MAX_SKIPPED_STEPS);
    }

    fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

impl Sessions {
    /// Prepares summaries in the background once a step passes `share` of the trigger
    /// (`None`: never; every compaction then summarizes while its request waits). Only
    /// summaries written by a model are prepared: the extractive one takes microseconds.
    pub fn with_summary_preparation(mut self, share: Option<f64>) -> Sessions {
        self.prepare_at = share.filter(|s| *s > 0.0 && *s < 1.0);
        self
    }

    /// After the answer to a committed step: starts the next compaction's summary when it is
    /// due, unless the answer ended the agent's turn (`ends_turn`: the agent may well be done,
    /// and a summary nobody asks for is a full-context call paid for nothing; the next
    /// request, if one comes, compacts as it would without preparation). `route` is how the
    /// step reached its upstream, which the summary call takes too.
    pub(super) fn prepare_ahead(
        &self,
        slot: &mut Slot,
        route: Option<&Arc<UpstreamRoute>>,
        ends_turn: bool,
    ) {
        let Some(share) = self.prepare_at else {
            return;
        };
        if self.upstream_summaries.is_none()
            && self.summarizer.name() == ctxkeeper_llm::EXTRACTIVE_PRODUCER
        {
            return;
        }
        // A newer step is under way: the answer to it prepares.
        if slot.live.is_none() || slot.pending.is_some() {
            return;
        }
        if ends_turn {
            Metrics::add(&self.metrics.preparations_skipped, 1);
            return;
        }
        if !slot.prepare_backoff.allows() {
            return;
        }
        let summarizer = self.step_summarizer(route, slot.last_forwarded.clone());
        let Some(live) = slot.live.as_mut() else {
            return;
        };
        // The caller's credentials stay with the preparation only, never with the session.
        let Some(preparation) = live.manager.summary_to_prepare_with(share, summarizer) else {
            return;
        };
        Metrics::add(&self.metrics.summaries_prepared, 1);
        let (delivery, receiver) = tokio::sync::oneshot::channel();
        slot.preparation = Some(receiver);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let prepared = preparation.run().await;
            if !prepared.is_ready() {
                Metrics::add(&metrics.summaries_failed, 1);
            }
            // A session evicted meanwhile dropped the receiver, and the summary goes with it.
            let _ = delivery.send(prepared);
        });
    }

    /// Before a step compacts: takes over the summary prepared in the background. When it
    /// is still on its way and this step compacts, the step waits for it rather than asking
    /// for the same summary again, at most the summary wait ([`Sessions::with_summary_wait`]);
    /// past that the step is told the preparation is late (`Late`) and compacts with the
    /// extractive summary, as a request whose own summary call is late does.
    pub(super) async fn collect_preparation(&self, slot: &mut Slot) -> Collected {
        let Some(receiver) = slot.preparation.as_mut() else {
            return Collected::Nothing;
        };
        let delivered = match receiver.try_recv() {
            Ok(prepared) => Some(prepared),
            Err(TryRecvError::Closed) => None,
            Err(TryRecvError::Empty) => {
                let compacts = slot.live.as_ref().is_some_and(|live| {
                    live.manager.preparing_summary() && live.manager.plan().is_some()
                });
                if !compacts {
                    return Collected::Nothing;
                }
                match tokio::time::timeout(self.summary_wait, receiver).await {
                    Ok(delivered) => delivered.ok(),
                    Err(_) => {
                        Metrics::add(&self.metrics.summaries_late, 1);
                        return Collected::Late(self.summary_wait);
                    }
                }
            }
        };
        slot.preparation = None;
        let Some(prepared) = delivered else {
            return Collected::Nothing;
        };
        if prepared.is_ready() {
            slot.prepare_backoff.succeeded();
        } else {
            slot.prepare_backoff.failed();
        }
        // A manager rebuilt meanwhile (reloaded) did not ask for it and discards it.
        if let Some(live) = slot.live.as_mut() {
            live.manager.accept_prepared(prepared);
        }
        Collected::Taken
    }
}

/// What [`Sessions::collect_preparation`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Collected {
    /// No preparation delivered, none this step waits for.
    Nothing,
    /// The prepared summary (or its failure) went to the manager.
    Taken,
    /// The step compacts while the preparation is still out past the wait bound.
    Late(std::time::Duration),
}

/// Stands in for the step's summarizer when the summary prepared for it is late: fails at
/// once, so the step compacts with the extractive summary (marked degraded).
#[derive(Debug)]
pub(super) struct LatePreparation {
    pub(super) summarizer: String,
    pub(super) waited: std::time::Duration,
}

#[async_trait::async_trait]
impl Summarizer for LatePreparation {
    async fn summarize(&self, _request: &SummaryRequest) -> Result<Summary, LlmError> {
        Err(LlmError::Transport {
            message: format!(
                "the summary being prepared by {} did not arrive within {:.1} s (the request's \
                 wait bound); it goes on in the background",
                self.summarizer,
                self.waited.as_secs_f64()
            ),
        })
    }

    fn name(&self) -> &str {
        &self.summarizer
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;

    /// The steps allowed out of `steps`, failing every preparation made.
    fn prepared_steps(steps: usize) -> Vec<usize> {
        let mut backoff = Backoff::default();
        let mut prepared = Vec::new();
        for step in 0..steps {
            if backoff.allows() {
                prepared.push(step);
                backoff.failed();
            }
        }
        prepared
    }

    #[test]
    fn failed_preparations_wait_twice_as_long_each_time() {
        assert_eq!(prepared_steps(40), vec![0, 2, 5, 10, 19, 36]);
        // Never more than MAX_SKIPPED_STEPS apart.
        let late = prepared_steps(400);
        assert!(
            late.windows(2)
                .all(|w| w[1] - w[0] <= Backoff::MAX_SKIPPED_STEPS as usize + 1)
        );
        let mut backoff = Backoff::default();
        backoff.failed();
        backoff.failed();
        backoff.succeeded();
        assert!(backoff.allows(), "a success starts over");
    }
}
