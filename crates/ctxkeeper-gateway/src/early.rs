//! Forwarding a large request body while it arrives.
//!
//! A gateway that reads the whole body before it sends it on adds one more transfer of that
//! body to every request: a 1M-token history is some 4 MB, and its second trip is most of
//! what the gateway adds to such a request. Most requests of a running session are forwarded
//! exactly as the client sent them (nothing compacted, nothing repaired), so the gateway
//! starts the upstream request as soon as the headers are read and passes each chunk on as
//! it comes in, while it reads, parses and prepares as before.
//!
//! The upstream cannot act on a request before its last byte: the body is announced with
//! its exact `Content-Length`, and the last byte is held back until the gateway has decided.
//! When the request goes on as it came, the last byte follows ([`EarlyRequest::release`]);
//! when the gateway rewrites it (a compaction, a repair) or refuses it, the upload is cut
//! short with an error ([`EarlyRequest::abort`], or by dropping it), the upstream never sees
//! a complete request, and the rewritten body goes in a request of its own.
//!
//! ```no_run
//! # async fn run(client: reqwest::Client, chunks: Vec<bytes::Bytes>, length: usize) {
//! use ctxkeeper_gateway::early::EarlyRequest;
//!
//! let metrics = std::sync::Arc::new(ctxkeeper_gateway::metrics::Metrics::default());
//! let url = "http://127.0.0.1:9000/v1/chat/completions";
//! let mut early = EarlyRequest::open(&client, url, Default::default(), length, metrics);
//! for chunk in &chunks {
//!     early.feed(chunk);
//! }
//! let answer = early.release().await; // or `early.abort()` to send something else
//! # }
//! ```

use std::io;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

/// Bodies from this size on are forwarded while they arrive, by default (256 KiB, some 64k
/// tokens): below it the second transfer costs less than starting the upload early.
pub const DEFAULT_FROM_BYTES: usize = 256 << 10;

type Chunk = Result<Bytes, io::Error>;

/// Whether `body` is the very buffer `client` is (not merely equal bytes): the body the
/// gateway forwards is the one the client's was read into, untouched.
pub fn same_buffer(body: &Bytes, client: &Bytes) -> bool {
    body.as_ptr() == client.as_ptr() && body.len() == client.len()
}

/// An upstream request whose body is sent while the client's arrives.
#[derive(Debug)]
pub struct EarlyRequest {
    /// `None` once the body is whole (the stream ends) or cut.
    sender: Option<mpsc::UnboundedSender<Chunk>>,
    answer: JoinHandle<reqwest::Result<reqwest::Response>>,
    announced: usize,
    passed: usize,
    /// The body's last byte, once it arrived: sent only on [`Self::release`].
    held: Option<Bytes>,
    metrics: Arc<Metrics>,
}

impl EarlyRequest {
    /// Starts `POST url` with `headers` and a body of exactly `announced` bytes, to come.
    pub fn open(
        client: &reqwest::Client,
        url: &str,
        mut headers: HeaderMap,
        announced: usize,
        metrics: Arc<Metrics>,
    ) -> EarlyRequest {
        Metrics::add(&metrics.bodies_forwarded_early, 1);
        let (sender, receiver) = mpsc::unbounded_channel::<Chunk>();
        let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|chunk| (chunk, receiver))
        });
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(announced));
        let request = client
            .post(url)
            .headers(headers)
            .body(reqwest::Body::wrap_stream(body))
            .send();
        EarlyRequest {
            sender: Some(sender),
            answer: tokio::spawn(request),
            announced,
            passed: 0,
            held: None,
            metrics,
        }
    }

    /// `early` if `body` is the very buffer the client's body was read into (`client`), so
    /// that completing the upload forwards exactly it; otherwise the upload is cut.
    pub fn taken_for(
        early: Option<EarlyRequest>,
        body: &Bytes,
        client: &Bytes,
    ) -> Option<EarlyRequest> {
        early.filter(|_| same_buffer(body, client))
    }

    /// Passes on the next chunk of the client's body, all but the body's last byte.
    pub fn feed(&mut self, chunk: &Bytes) {
        // What may go now: everything before the body's last byte (slices share the chunk).
        let before_last = self.announced.saturating_sub(1);
        let sendable = before_last.saturating_sub(self.passed).min(chunk.len());
        if sendable > 0 {
            self.send(Ok(chunk.slice(..sendable)));
        }
        if sendable < chunk.len() {
            self.held = Some(chunk.slice(sendable..));
        }
        self.passed += chunk.len();
    }

    fn send(&self, chunk: Chunk) {
        if let Some(sender) = &self.sender {
            // A closed channel means the upload already failed: its error is the answer's.
            let _ = sender.send(chunk);
        }
    }

    /// Whether the whole announced body arrived and nothing beyond it.
    pub fn complete(&self) -> bool {
        self.passed == self.announced && self.held.is_some()
    }

    /// Sends the held last byte and waits for the upstream's answer: the request goes on as
    /// the client sent it. `None` when the body did not arrive whole (the upload is cut).
    pub async fn release(mut self) -> Option<reqwest::Result<reqwest::Response>> {
        if !self.complete() {
            return None;
        }
        let last = self.held.take()?;
        self.send(Ok(last));
        // The stream ends: the body is whole.
        self.sender = None;
        (&mut self.answer).await.ok()
    }

    /// Cuts the upload short: the upstream sees an unfinished body, never a request.
    pub fn abort(self) {
        drop(self);
    }
}

impl Drop for EarlyRequest {
    /// An upload not released is cut with an error (hyper then closes the connection before
    /// the announced length): the upstream gets no request to act on. What it answers, if
    /// anything, is not read.
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            Metrics::add(&self.metrics.early_forwards_cut, 1);
            let _ = sender.send(Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the gateway did not forward this body as it came",
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use axum::Router;
    use axum::extract::State;
    use axum::routing::post;

    use super::*;

    /// A server that keeps every body it received whole, and answers with its length.
    async fn recording_server() -> (String, Arc<Mutex<Vec<Bytes>>>) {
        let received = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route(
                "/v1/chat/completions",
                post(
                    |State(received): State<Arc<Mutex<Vec<Bytes>>>>, body: Bytes| async move {
                        let length = body.len();
                        received.lock().unwrap().push(body);
                        length.to_string()
                    },
                ),
            )
            .with_state(Arc::clone(&received));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, received)
    }

    fn body(size: usize) -> Bytes {
        Bytes::from(
            (0..size)
                .map(|i| b'a' + (i % 26) as u8)
                .collect::<Vec<u8>>(),
        )
    }

    /// Feeds `body` in chunks of `chunk` bytes.
    fn feed_all(early: &mut EarlyRequest, body: &Bytes, chunk: usize) {
        let mut at = 0;
        while at < body.len() {
            let end = (at + chunk).min(body.len());
            early.feed(&body.slice(at..end));
            at = end;
        }
    }

    #[tokio::test]
    async fn a_released_upload_delivers_the_body_byte_for_byte() {
        let (url, received) = recording_server().await;
        let client = reqwest::Client::new();
        let metrics = Arc::new(Metrics::default());
        for (size, chunk) in [(1, 1), (300_000, 65_536), (300_000, 7), (4_096, 4_096)] {
            let sent = body(size);
            let mut early =
                EarlyRequest::open(&client, &url, HeaderMap::new(), size, Arc::clone(&metrics));
            feed_all(&mut early, &sent, chunk);
            assert!(early.complete());
            let answer = early.release().await.unwrap().unwrap();
            assert_eq!(answer.text().await.unwrap(), size.to_string());
            assert_eq!(received.lock().unwrap().last(), Some(&sent));
        }
        assert_eq!(Metrics::get(&metrics.bodies_forwarded_early), 4);
        assert_eq!(Metrics::get(&metrics.early_forwards_cut), 0);
    }

    #[tokio::test]
    async fn a_cut_upload_never_reaches_the_upstream_as_a_request() {
        let (url, received) = recording_server().await;
        let client = reqwest::Client::new();
        let metrics = Arc::new(Metrics::default());
        let sent = body(200_000);
        // The whole body arrived, then the gateway sends something else.
        let mut whole = EarlyRequest::open(
            &client,
            &url,
            HeaderMap::new(),
            sent.len(),
            Arc::clone(&metrics),
        );
        feed_all(&mut whole, &sent, 10_000);
        whole.abort();
        // Part of it arrived (the client went away, or was refused on the way).
        let mut part = EarlyRequest::open(
            &client,
            &url,
            HeaderMap::new(),
            sent.len(),
            Arc::clone(&metrics),
        );
        part.feed(&sent.slice(..50_000));
        assert!(!part.complete());
        assert!(
            part.release().await.is_none(),
            "an unfinished body is not sent"
        );
        // Time for a request to arrive, were one on its way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(received.lock().unwrap().is_empty());
        assert_eq!(Metrics::get(&metrics.early_forwards_cut), 2);
        // The client still reaches the upstream afterwards.
        let after = client.post(&url).body(sent.clone()).send().await.unwrap();
        assert_eq!(after.text().await.unwrap(), sent.len().to_string());
        assert_eq!(received.lock().unwrap().len(), 1);
    }
}
