//! Bounds on what clients can make the gateway hold: request body bytes in flight, and the
//! time a client may take to send a body.
//!
//! A parsed request costs several times its body in memory (the bytes, the JSON tree, the
//! neutral messages, the emitted request), so the body bytes held at once are capped over
//! every request together: a request that would go over the cap is refused at once with 503
//! and `Retry-After` instead of queueing (a queue of 32 MB bodies is itself the memory
//! problem).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::sync::Arc;
//! use ctxkeeper_gateway::limits::InflightBytes;
//! use ctxkeeper_gateway::metrics::Metrics;
//!
//! let inflight = InflightBytes::new(100, Arc::new(Metrics::default()));
//! let mut first = inflight.admit(60).unwrap();
//! assert!(inflight.admit(60).is_none(), "over the cap");
//! assert!(inflight.grow(&mut first, 30), "a streamed body grows its own permit");
//! drop(first);
//! assert!(inflight.admit(100).is_some(), "released on drop");
//! # });
//! ```

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// The cap on request body bytes held at once.
#[derive(Debug)]
pub struct InflightBytes {
    semaphore: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// Body bytes a request holds; released when dropped.
#[derive(Debug)]
pub struct BodyPermit {
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
    metrics: Arc<Metrics>,
}

impl InflightBytes {
    /// A cap of `max_bytes` (clamped to what a semaphore can count).
    pub fn new(max_bytes: usize, metrics: Arc<Metrics>) -> InflightBytes {
        InflightBytes {
            semaphore: Arc::new(Semaphore::new(max_bytes.min(Semaphore::MAX_PERMITS))),
            metrics,
        }
    }

    /// Admits a body of `bytes`, or `None` when that would go over the cap.
    pub fn admit(&self, bytes: usize) -> Option<BodyPermit> {
        let mut permit = BodyPermit {
            permit: None,
            bytes: 0,
            metrics: self.metrics.clone(),
        };
        self.grow(&mut permit, bytes).then_some(permit)
    }

    /// Adds `bytes` to a permit (a body of unannounced length, read chunk by chunk); false
    /// when that would go over the cap.
    pub fn grow(&self, permit: &mut BodyPermit, bytes: usize) -> bool {
        if bytes == 0 {
            return true;
        }
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        let Ok(more) = self.semaphore.clone().try_acquire_many_owned(n) else {
            Metrics::add(&self.metrics.overload_rejections, 1);
            return false;
        };
        match permit.permit.as_mut() {
            Some(held) => held.merge(more),
            None => permit.permit = Some(more),
        }
        permit.bytes += bytes;
        Metrics::add(&self.metrics.inflight_body_bytes, bytes as u64);
        true
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        Metrics::sub(&self.metrics.inflight_body_bytes, self.bytes as u64);
    }
}
