//! Overflow recovery: the provider said the request was too long; compact as far as the limit
//! requires (never further, never below what the model needs to go on) and let the caller
//! retry, within a bounded number of attempts.

use super::*;

impl ContextManager {
    /// Handles a provider's context-overflow error: compacts until the request fits `limit`
    /// (the limit the error stated or the gateway learned, else the size that failed). Attempt
    /// `n` aims at `shrink_factor^n` of that limit, or at the policy's own target when that is
    /// higher: a recovery compacts as far as the limit requires, not further. It never removes
    /// the newest round, the user's latest request or the capsule; when those alone do not fit,
    /// it returns [`Error::NoRoom`] instead of an emptied conversation. `attempt` starts at 1;
    /// past the policy's `overflow.max_attempts` this gives up, so a retry loop always
    /// terminates.
    pub async fn handle_overflow(
        &mut self,
        attempt: u32,
        failed_tokens: u64,
        limit: Option<u64>,
    ) -> Result<Prepared, Error> {
        let summarizer = Arc::clone(&self.summarizer);
        self.handle_overflow_with(summarizer.as_ref(), attempt, failed_tokens, limit)
            .await
    }

    /// [`Self::handle_overflow`], summarizing with `summarizer`, which the manager does not
    /// keep.
    pub async fn handle_overflow_with(
        &mut self,
        summarizer: &dyn Summarizer,
        attempt: u32,
        failed_tokens: u64,
        limit: Option<u64>,
    ) -> Result<Prepared, Error> {
        let budget = self.budget();
        let max_attempts = self.engine.config().overflow.max_attempts;
        let tokens_before = self.engine.request_tokens(&mut self.state, &budget);
        if attempt > max_attempts {
            return Err(Error::Unrecoverable {
                attempts: max_attempts,
                tokens: tokens_before,
            });
        }
        let shrink = self
            .engine
            .config()
            .overflow
            .shrink_factor
            .powi(attempt as i32);
        // What fits: below the stated limit and below what just failed.
        let ceiling = limit
            .unwrap_or(failed_tokens)
            .min(failed_tokens.saturating_sub(1))
            .max(1);
        let target = ((ceiling as f64) * shrink) as u64;
        let mut uncut: Option<Entry> = None;
        let plan = loop {
            let cut_newest = uncut.is_some();
            let current = if cut_newest {
                self.engine.request_tokens(&mut self.state, &budget)
            } else {
                tokens_before
            };
            let mut request = PlanRequest {
                force: Some(CompactionReason::Overflow),
                target_tokens: Some(target),
                attempt,
                ..PlanRequest::default()
            };
            let started = Instant::now();
            let mut plan = self.engine.plan(&mut self.state, &budget, &request);
            // Before the attempt that may clear, what the other stages leave is kept when it
            // fits; when it does not, clearing now beats sending a request known to fail.
            let clear_from = self.engine.config().overflow.clear_from_attempt;
            if attempt < clear_from
                && plan
                    .as_ref()
                    .is_none_or(|plan| plan.estimated_tokens_after > ceiling)
            {
                request.attempt = clear_from;
                plan = self.engine.plan(&mut self.state, &budget, &request);
            }
            self.clock.engine += started.elapsed();
            let needed = match &plan {
                Some(plan) if plan.estimated_tokens_after > ceiling => plan.estimated_tokens_after,
                Some(_) => break plan,
                // Nothing left to compact: what remains is what must stay.
                None if current > ceiling => current,
                None if cut_newest => break None,
                None => {
                    return Err(Error::Unrecoverable {
                        attempts: attempt,
                        tokens: tokens_before,
                    });
                }
            };
            // What must stay does not fit: the newest round's tool output is cut to a preview
            // (whole in the archive) rather than nothing being sent, once.
            let cut = if cut_newest {
                None
            } else {
                self.cut_newest_results(needed - ceiling).await?
            };
            let Some(original) = cut else {
                // Nothing is removed: the newest round goes back as it was.
                if let Some(original) = uncut {
                    self.state.entries.pop();
                    self.state.entries.push(original);
                    self.state.invalidate_totals();
                }
                return Err(Error::NoRoom {
                    needed,
                    limit: ceiling,
                });
            };
            uncut = Some(original);
        };
        if let Some(plan) = plan {
            self.execute(plan, summarizer).await?;
        }
        let tokens_after = self.engine.request_tokens(&mut self.state, &budget);
        self.emit(vec![Event::OverflowRecovered {
            attempt,
            tokens_before,
            tokens_after,
            limit,
        }]);
        Ok(self.prepared(true))
    }
}
