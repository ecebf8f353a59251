//! Prometheus metrics in the text exposition format, kept with atomics (no registry crate:
//! the gateway has a handful of fixed series, and recording one must cost nanoseconds).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `ctxkeeper_requests_total` | counter | `endpoint`, `status` |
//! | `ctxkeeper_upstream_latency_seconds` | histogram | |
//! | `ctxkeeper_gateway_overhead_seconds` | histogram (total minus upstream time) | |
//! | `ctxkeeper_compactions_total` | counter | |
//! | `ctxkeeper_tokens_saved_total` | counter | |
//! | `ctxkeeper_overflow_recoveries_total` | counter | |
//! | `ctxkeeper_history_divergences_total` | counter | |
//! | `ctxkeeper_store_conflicts_total` | counter | |
//! | `ctxkeeper_commit_failures_total` | counter (steps the model answered but the store refused) | |
//! | `ctxkeeper_steps_abandoned_total` | counter (steps whose model call failed: nothing stored) | |
//! | `ctxkeeper_repeated_overflows_total` | counter (overflows on consecutive requests of a session) | |
//! | `ctxkeeper_recoveries_refused_total` | counter (the circuit breaker passed the error through) | |
//! | `ctxkeeper_overload_rejections_total` | counter (503: in-flight body bytes over the cap) | |
//! | `ctxkeeper_client_timeouts_total` | counter (bodies not received in time) | |
//! | `ctxkeeper_sessions_evicted_total` | counter (warm sessions dropped by count or idle time) | |
//! | `ctxkeeper_session_forks_total` | counter (conversations forked off a stored session) | |
//! | `ctxkeeper_client_compactions_total` | counter (histories the client compacted itself that continued their session) | |
//! | `ctxkeeper_preparations_skipped_total` | counter (summaries not prepared after an agent's final answer) | |
//! | `ctxkeeper_summaries_prepared_total` | counter (summaries started in the background before the trigger) | |
//! | `ctxkeeper_summaries_failed_total` | counter (summary calls that failed: in a compaction or prepared in the background) | |
//! | `ctxkeeper_summaries_degraded_total` | counter (compactions applied with a degraded, extractive stand-in summary) | |
//! | `ctxkeeper_summaries_late_total` | counter (model summaries a request stopped waiting for; the extractive one stood in) | |
//! | `ctxkeeper_resent_messages_reused_total` | counter (resent messages taken from the session's previous request, not parsed again) | |
//! | `ctxkeeper_bodies_forwarded_early_total` | counter (large bodies sent upstream while they arrived) | |
//! | `ctxkeeper_early_forwards_cut_total` | counter (of those, uploads cut because the gateway sent another body or none) | |
//! | `ctxkeeper_events_dropped_total` | counter (the event publisher's queue was full) | |
//! | `ctxkeeper_spans_exported_total` | counter (spans the OTLP collector accepted) | |
//! | `ctxkeeper_spans_dropped_total` | counter (spans dropped: the export queue was full) | |
//! | `ctxkeeper_spans_export_failed_total` | counter (spans of export requests that failed) | |
//! | `ctxkeeper_cache_stalls_total` | counter (sessions whose prompt cache stopped serving: `cache_stalled`) | |
//! | `ctxkeeper_warm_sessions` | gauge | |
//! | `ctxkeeper_event_subscriptions` | gauge (open `/v1/sessions/{id}/events` streams) | |
//! | `ctxkeeper_event_channels` | gauge (sessions with at least one subscriber) | |
//! | `ctxkeeper_inflight_body_bytes` | gauge | |
//!
//! ```
//! use std::time::Duration;
//! use ctxkeeper_gateway::metrics::Metrics;
//!
//! let metrics = Metrics::default();
//! metrics.request("chat_completions", 200);
//! metrics.upstream_latency(Duration::from_millis(120));
//! let text = metrics.render();
//! assert!(text.contains(r#"ctxkeeper_requests_total{endpoint="chat_completions",status="200"} 1"#));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Histogram bucket bounds in seconds: from 25 µs (gateway overhead, finely bucketed below a
/// millisecond so its p50 and p99 can be read off) to 5 minutes (long upstream generations).
const BUCKETS: [f64; 24] = [
    0.000_025, 0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_4, 0.000_5,
    0.000_75, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
    300.0,
];

/// A fixed-bucket histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(value.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Every metric the gateway keeps.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (endpoint, status) → count. A mutex is fine: the key set is tiny and the lock is held
    /// for one map update.
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    pub upstream: Histogram,
    pub overhead: Histogram,
    pub compactions: AtomicU64,
    pub tokens_saved: AtomicU64,
    pub overflow_recoveries: AtomicU64,
    pub divergences: AtomicU64,
    pub store_conflicts: AtomicU64,
    pub commit_failures: AtomicU64,
    pub steps_abandoned: AtomicU64,
    pub repeated_overflows: AtomicU64,
    pub recoveries_refused: AtomicU64,
    pub overload_rejections: AtomicU64,
    pub client_timeouts: AtomicU64,
    pub sessions_evicted: AtomicU64,
    pub events_dropped: AtomicU64,
    pub session_forks: AtomicU64,
    pub client_compactions: AtomicU64,
    pub preparations_skipped: AtomicU64,
    pub summaries_prepared: AtomicU64,
    pub summaries_failed: AtomicU64,
    pub summaries_degraded: AtomicU64,
    pub summaries_late: AtomicU64,
    pub resent_messages_reused: AtomicU64,
    pub bodies_forwarded_early: AtomicU64,
    pub early_forwards_cut: AtomicU64,
    pub spans_exported: AtomicU64,
    pub spans_dropped: AtomicU64,
    pub spans_export_failed: AtomicU64,
    pub cache_stalls: AtomicU64,
    /// Gauges, kept up to date by their owners.
    pub warm_sessions: AtomicU64,
    pub event_subscriptions: AtomicU64,
    pub event_channels: AtomicU64,
    pub inflight_body_bytes: AtomicU64,
}

impl Metrics {
    /// Counts one answered request.
    pub fn request(&self, endpoint: &'static str, status: u16) {
        if let Ok(mut map) = self.requests.lock() {
            *map.entry((endpoint, status)).or_default() += 1;
        }
    }

    /// Records the time the upstream took.
    pub fn upstream_latency(&self, elapsed: Duration) {
        self.upstream.observe(elapsed);
    }

    /// Records the gateway's own time for one request.
    pub fn gateway_overhead(&self, elapsed: Duration) {
        self.overhead.observe(elapsed);
    }

    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Lowers a gauge (never below zero).
    pub fn sub(gauge: &AtomicU64, n: u64) {
        let _ = gauge.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_sub(n))
        });
    }

    /// Sets a gauge.
    pub fn set(gauge: &AtomicU64, value: u64) {
        gauge.store(value, Ordering::Relaxed);
    }

    /// Reads a counter or gauge.
    pub fn get(value: &AtomicU64) -> u64 {
        value.load(Ordering::Relaxed)
    }

    /// A step the model answered could not be committed.
    pub fn commit_failed(&self) {
        Metrics::add(&self.commit_failures, 1);
    }

    /// How many requests were answered on `endpoint` with `status`.
    pub fn requests(&self, endpoint: &str, status: u16) -> u64 {
        self.requests
            .lock()
            .map(|map| {
                map.iter()
                    .filter(|((e, s), _)| *e == endpoint && *s == status)
                    .map(|(_, n)| *n)
                    .sum()
            })
            .unwrap_or(0)
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP ctxkeeper_requests_total Requests answered, by endpoint and status.\n# TYPE ctxkeeper_requests_total counter\n");
        if let Ok(map) = self.requests.lock() {
            for ((endpoint, status), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "ctxkeeper_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
        }
        self.upstream.render(
            "ctxkeeper_upstream_latency_seconds",
            "Time the upstream took to answer (whole body; headers for streams).",
            &mut out,
        );
        self.overhead.render(
            "ctxkeeper_gateway_overhead_seconds",
            "Gateway time per request: total minus upstream time.",
            &mut out,
        );
        for (name, help, counter) in [
            (
                "ctxkeeper_compactions_total",
                "Compactions applied.",
                &self.compactions,
            ),
            (
                "ctxkeeper_tokens_saved_total",
                "Tokens removed from contexts by compaction and ingest caps.",
                &self.tokens_saved,
            ),
            (
                "ctxkeeper_overflow_recoveries_total",
                "Upstream context-overflow errors recovered by compacting and retrying.",
                &self.overflow_recoveries,
            ),
            (
                "ctxkeeper_history_divergences_total",
                "Requests whose history diverged from the stored session.",
                &self.divergences,
            ),
            (
                "ctxkeeper_store_conflicts_total",
                "Session saves that lost a compare-and-swap and were redone.",
                &self.store_conflicts,
            ),
            (
                "ctxkeeper_commit_failures_total",
                "Steps the model answered that the store did not commit (the next step carries them).",
                &self.commit_failures,
            ),
            (
                "ctxkeeper_steps_abandoned_total",
                "Steps whose model call failed; nothing of them was stored or logged.",
                &self.steps_abandoned,
            ),
            (
                "ctxkeeper_repeated_overflows_total",
                "Context overflows on a session whose previous request overflowed too.",
                &self.repeated_overflows,
            ),
            (
                "ctxkeeper_recoveries_refused_total",
                "Overflows passed to the client because the session kept overflowing.",
                &self.recoveries_refused,
            ),
            (
                "ctxkeeper_overload_rejections_total",
                "Requests refused with 503 because too many body bytes were in flight.",
                &self.overload_rejections,
            ),
            (
                "ctxkeeper_client_timeouts_total",
                "Requests whose body did not arrive within the body timeout.",
                &self.client_timeouts,
            ),
            (
                "ctxkeeper_session_forks_total",
                "Conversations that diverged early from a stored session and got a session of their own.",
                &self.session_forks,
            ),
            (
                "ctxkeeper_client_compactions_total",
                "Histories a client compacted itself (Codex's checkpoint, Claude Code's compact) that continued their session instead of forking it.",
                &self.client_compactions,
            ),
            (
                "ctxkeeper_preparations_skipped_total",
                "Summaries not prepared in the background because the answer ended the agent's turn (text, no tool call).",
                &self.preparations_skipped,
            ),
            (
                "ctxkeeper_summaries_prepared_total",
                "Summaries started in the background before a session reached its trigger.",
                &self.summaries_prepared,
            ),
            (
                "ctxkeeper_summaries_failed_total",
                "Summary calls that failed (in a compaction, or prepared in the background).",
                &self.summaries_failed,
            ),
            (
                "ctxkeeper_summaries_degraded_total",
                "Compactions applied with a degraded summary (the extractive stand-in for a failed one).",
                &self.summaries_degraded,
            ),
            (
                "ctxkeeper_summaries_late_total",
                "Model summaries a request stopped waiting for at the wait bound (the extractive summary stood in).",
                &self.summaries_late,
            ),
            (
                "ctxkeeper_resent_messages_reused_total",
                "Messages of resent histories taken from the session's previous request instead of parsed again.",
                &self.resent_messages_reused,
            ),
            (
                "ctxkeeper_bodies_forwarded_early_total",
                "Large request bodies whose upload to the upstream started while they arrived.",
                &self.bodies_forwarded_early,
            ),
            (
                "ctxkeeper_early_forwards_cut_total",
                "Early uploads cut short because the request was rewritten (a compaction, a repair) or refused.",
                &self.early_forwards_cut,
            ),
            (
                "ctxkeeper_events_dropped_total",
                "Session events dropped because the publisher's queue was full.",
                &self.events_dropped,
            ),
            (
                "ctxkeeper_spans_exported_total",
                "Trace spans the OTLP collector accepted.",
                &self.spans_exported,
            ),
            (
                "ctxkeeper_spans_dropped_total",
                "Trace spans dropped because the export queue was full (a collector down or slow).",
                &self.spans_dropped,
            ),
            (
                "ctxkeeper_spans_export_failed_total",
                "Trace spans in export requests that failed (collector unreachable or refusing).",
                &self.spans_export_failed,
            ),
            (
                "ctxkeeper_cache_stalls_total",
                "Sessions that sent many fresh input tokens with no cache reads over several calls in a row (cache_stalled events).",
                &self.cache_stalls,
            ),
            (
                "ctxkeeper_sessions_evicted_total",
                "Warm sessions dropped from memory (by count or idle time); they reload from the store.",
                &self.sessions_evicted,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        for (name, help, gauge) in [
            (
                "ctxkeeper_warm_sessions",
                "Sessions held in memory.",
                &self.warm_sessions,
            ),
            (
                "ctxkeeper_event_subscriptions",
                "Open session event streams.",
                &self.event_subscriptions,
            ),
            (
                "ctxkeeper_event_channels",
                "Sessions with at least one event subscriber.",
                &self.event_channels,
            ),
            (
                "ctxkeeper_inflight_body_bytes",
                "Request body bytes being read or handled.",
                &self.inflight_body_bytes,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                gauge.load(Ordering::Relaxed)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let metrics = Metrics::default();
        metrics.gateway_overhead(Duration::from_micros(40));
        metrics.gateway_overhead(Duration::from_millis(3));
        let text = metrics.render();
        assert!(text.contains("ctxkeeper_gateway_overhead_seconds_bucket{le=\"0.00005\"} 1"));
        assert!(text.contains("ctxkeeper_gateway_overhead_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("ctxkeeper_gateway_overhead_seconds_count 2"));
    }

    #[test]
    fn requests_are_counted_by_endpoint_and_status() {
        let metrics = Metrics::default();
        metrics.request("messages", 200);
        metrics.request("messages", 200);
        metrics.request("messages", 400);
        assert_eq!(metrics.requests("messages", 200), 2);
        assert_eq!(metrics.requests("messages", 400), 1);
        assert_eq!(metrics.requests("responses", 200), 0);
    }
}
