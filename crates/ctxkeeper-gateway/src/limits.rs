//! Bounds on what clients can make the gateway hold: request body bytes in flight, and the
//! time a client may take to send a body.
//!
//! A parsed request costs several times its body in memory, so what the requests in flight
//! hold is capped over every request together: a request that would go over the cap is
//! refused at once with 503 and `Retry-After` instead of queueing (a queue of 32 MB bodies is
//! itself the memory problem). While a body arrives its permit counts the bytes received;
//! once it is in, the permit grows to what handling it costs: [`BODY_BYTE_COST`] for each
//! byte received, plus [`PARSED_BYTE_COST`] for each byte that is parsed (the whole body, or only what follows
//! the session's resent prefix, [`crate::resent`]), at most the whole cap, so that a request
//! within the body limit is always served alone.
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

/// What a received body byte costs, parsed or not: the byte itself, and as much again for
/// the chunks it arrived in while they wait for an early upload to the upstream
/// ([`crate::early`]): a resent history whose known prefix is put back (nothing of it parsed
/// again) peaked at 1.1–1.7× its body in `tests/body_memory.rs`, as fast as the upstream
/// took the upload.
pub const BODY_BYTE_COST: usize = 2;

/// What a parsed body byte costs on top of [`BODY_BYTE_COST`], at the peak of its request:
/// the parsed JSON (moved into the request's messages), the session's copy of its context,
/// and the step's saved copies (the state, the log rows and their search text) at the
/// commit. Measured with a counting allocator on a fresh 8 MiB chat history
/// (`tests/body_memory.rs`): the request peaked at 6.3× the body, the body itself included
/// (SQLite's own copies of the rows it writes, in the system allocator, are not counted).
pub const PARSED_BYTE_COST: usize = 6;

/// The cap on request bytes held at once.
#[derive(Debug)]
pub struct InflightBytes {
    semaphore: Arc<Semaphore>,
    max: usize,
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
        let max = max_bytes.min(Semaphore::MAX_PERMITS);
        InflightBytes {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
            metrics,
        }
    }

    /// Grows a permit to what handling a body of `body` bytes costs, `parsed` of them parsed
    /// ([`BODY_BYTE_COST`], [`PARSED_BYTE_COST`]), at most the whole cap; false when that
    /// would go over the cap.
    pub fn hold_parsed(&self, permit: &mut BodyPermit, body: usize, parsed: usize) -> bool {
        let cost = body
            .saturating_mul(BODY_BYTE_COST)
            .saturating_add(parsed.saturating_mul(PARSED_BYTE_COST))
            .min(self.max);
        self.grow(permit, cost.saturating_sub(permit.bytes))
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

/// The request body of every route, cut off when it has not fully arrived by its deadline
/// (the gateway's body timeout, counted from when the request's headers arrived). Whatever
/// reads the body then sees a [`BodyDeadline`] error: the model endpoints answer 408 in the
/// client's shape, the other faces refuse the request, and the connection closes.
#[derive(Debug)]
pub struct DeadlineBody {
    inner: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    timeout: std::time::Duration,
}

/// A body that did not arrive within the body timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body did not arrive within {} s (body_timeout_secs)", .0.as_secs())]
pub struct BodyDeadline(pub std::time::Duration);

impl BodyDeadline {
    /// Whether `error` (or what caused it) is a body deadline.
    pub fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut current = Some(error);
        while let Some(error) = current {
            if error.is::<BodyDeadline>() {
                return true;
            }
            current = error.source();
        }
        false
    }
}

impl DeadlineBody {
    /// `inner`, to arrive completely within `timeout` from now.
    pub fn new(inner: axum::body::Body, timeout: std::time::Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl hyper::body::Body for DeadlineBody {
    type Data = bytes::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Some(Err(Box::new(BodyDeadline(this.timeout)))))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's socket until its protocol is known: the first 24 bytes (what tells HTTP/2's
/// preface from an HTTP/1 request line) must arrive within the header timeout, or reads fail
/// and the connection closes. After that HTTP/1's header timeout and HTTP/2's keep-alive
/// pings bound an idle connection.
#[derive(Debug)]
pub struct Handshake<S> {
    inner: S,
    read: usize,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

/// The bytes that tell the protocol: the length of HTTP/2's connection preface.
const PROTOCOL_BYTES: usize = 24;

impl<S> Handshake<S> {
    /// `inner`, whose first bytes must arrive within `timeout`.
    pub fn new(inner: S, timeout: std::time::Duration) -> Handshake<S> {
        Handshake {
            inner,
            read: 0,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Handshake<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        use std::task::Poll;
        let this = &mut *self;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.read += buf.filled().len() - before;
                if this.read >= PROTOCOL_BYTES {
                    this.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    this.deadline = None;
                    Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client sent no request within the header timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Handshake<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
