//! Summaries written in the background, before the trigger: once a committed step leaves the
//! context past a soft threshold (a share of the active trigger), the summary the next
//! compaction needs is asked for off the session's lock, on the step's own summarizer (for
//! the upstream summarizer: the body just forwarded plus the instruction, on the provider's
//! prompt cache). The request that then crosses the trigger applies it without waiting for a
//! model, and keeps every message that arrived meanwhile verbatim (see
//! [`ctxkeeper::SummaryPreparation`]).

use std::sync::Arc;

use tokio::sync::Mutex;

use super::slot::Slot;
use super::{Incoming, Sessions};
use crate::metrics::Metrics;

/// The soft threshold by default: a summary is prepared once the request passes this share of
/// the trigger.
pub const DEFAULT_PREPARE_AT: f64 = 0.75;

impl Sessions {
    /// Prepares summaries in the background once a step passes `share` of the trigger
    /// (`None`: never; every compaction then summarizes while its request waits). Only
    /// summaries written by a model are prepared: the extractive one takes microseconds.
    pub fn with_summary_preparation(mut self, share: Option<f64>) -> Sessions {
        self.prepare_at = share.filter(|s| *s > 0.0 && *s < 1.0);
        self
    }

    /// After a committed step: starts the next compaction's summary when it is due.
    pub(super) fn prepare_ahead(
        &self,
        cell: &Arc<Mutex<Slot>>,
        slot: &mut Slot,
        incoming: &Incoming,
    ) {
        let Some(share) = self.prepare_at else {
            return;
        };
        if self.upstream_summaries.is_none()
            && self.summarizer.name() == ctxkeeper_llm::EXTRACTIVE_PRODUCER
        {
            return;
        }
        let summarizer = self.step_summarizer(incoming.route.as_ref(), slot.last_forwarded.clone());
        let Some(live) = slot.live.as_mut() else {
            return;
        };
        // The caller's credentials stay with the preparation only, never with the session.
        let Some(preparation) = live.manager.summary_to_prepare_with(share, summarizer) else {
            return;
        };
        Metrics::add(&self.metrics.summaries_prepared, 1);
        let cell = cell.clone();
        tokio::spawn(async move {
            let prepared = preparation.run().await;
            let mut slot = cell.lock().await;
            // A manager rebuilt meanwhile (evicted, reloaded) did not ask for it and
            // discards it.
            if let Some(live) = slot.live.as_mut() {
                live.manager.accept_prepared(prepared);
            }
        });
    }
}
