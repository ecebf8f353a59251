//! W3C trace context: the client's `traceparent` / `tracestate` read, fresh ids drawn, and
//! the `traceparent` the upstream gets (the gateway's span as its parent).
//!
//! ```
//! use axum::http::HeaderMap;
//! use ctxkeeper_gateway::telemetry::{SpanId, TraceContext};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap());
//! let context = TraceContext::from_headers(&headers);
//! assert_eq!(context.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(context.parent.map(|p| p.hex()).as_deref(), Some("00f067aa0ba902b7"));
//! let child = SpanId::random();
//! assert!(context.traceparent(child).ends_with(&format!("{}-01", child.hex())));
//! ```

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::HeaderMap;

/// An 8-byte span id, never all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl SpanId {
    /// A fresh random id.
    pub fn random() -> SpanId {
        SpanId(random_u64().to_be_bytes())
    }

    /// Lowercase hex, as in `traceparent`.
    pub fn hex(self) -> String {
        hex::encode(self.0)
    }
}

/// The trace a request belongs to: the client's (its `traceparent`), else a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The client's span, parent of the gateway's spans; `None` for a trace the gateway began.
    pub parent: Option<SpanId>,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
    /// The client's `tracestate`, passed on as it came.
    pub trace_state: String,
}

impl TraceContext {
    /// The trace context of a request: its valid `traceparent` (and `tracestate`), else a
    /// new sampled trace. An invalid `traceparent` is ignored, as the W3C spec asks.
    pub fn from_headers(headers: &HeaderMap) -> TraceContext {
        let state = headers
            .get_all("tracestate")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        let parent = headers
            .get("traceparent")
            .and_then(|value| value.to_str().ok());
        TraceContext::from_values(parent, Some(&state))
    }

    /// The trace context `traceparent` and `tracestate` name (as an MCP request's `_meta`
    /// carries them), else a new sampled trace.
    pub fn from_values(traceparent: Option<&str>, tracestate: Option<&str>) -> TraceContext {
        match traceparent.and_then(parse_traceparent) {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                parent: Some(parent),
                flags,
                trace_state: tracestate.unwrap_or_default().to_string(),
            },
            None => TraceContext::root(),
        }
    }

    /// A new sampled trace with no parent.
    pub fn root() -> TraceContext {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&random_u64().to_be_bytes());
        trace_id[8..].copy_from_slice(&random_u64().to_be_bytes());
        TraceContext {
            trace_id,
            parent: None,
            flags: 1,
            trace_state: String::new(),
        }
    }

    /// Whether the trace is sampled: a client that said not to gets no spans recorded.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The `traceparent` naming `span` as the parent of whatever comes next.
    pub fn traceparent(&self, span: SpanId) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            span.hex(),
            self.flags
        )
    }
}

/// `version-traceid-parentid-flags`, all lowercase hex; ids not all zeros, version not `ff`.
/// A future version may append fields after a dash, which are ignored.
fn parse_traceparent(text: &str) -> Option<([u8; 16], SpanId, u8)> {
    let text = text.trim();
    let mut fields = text.split('-');
    let version = fields.next()?;
    let trace = fields.next()?;
    let parent = fields.next()?;
    let flags = fields.next()?;
    let well_formed = version.len() == 2
        && trace.len() == 32
        && parent.len() == 16
        && flags.len() == 2
        && [version, trace, parent, flags].iter().all(|field| {
            field
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
    if !well_formed || version == "ff" || (version == "00" && fields.next().is_some()) {
        return None;
    }
    let mut trace_id = [0u8; 16];
    hex::decode_to_slice(trace, &mut trace_id).ok()?;
    let mut span = [0u8; 8];
    hex::decode_to_slice(parent, &mut span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == [0; 16] || span == [0; 8] {
        return None;
    }
    Some((trace_id, SpanId(span), flags))
}

/// A random non-zero 64-bit value: the process's randomly keyed SipHash over a counter (the
/// standard library seeds each `RandomState` from the operating system).
fn random_u64() -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let keys = KEYS.get_or_init(std::collections::hash_map::RandomState::new);
    loop {
        let mut hasher = keys.build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let value = hasher.finish();
        if value != 0 {
            return value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(traceparent: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HeaderValue::from_str(traceparent).unwrap());
        headers
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_its_state() {
        let mut map = headers("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        map.append("tracestate", HeaderValue::from_static("congo=t61rcWkgMzE"));
        map.append(
            "tracestate",
            HeaderValue::from_static("rojo=00f067aa0ba902b7"),
        );
        let context = TraceContext::from_headers(&map);
        assert_eq!(context.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            context.parent,
            Some(SpanId(0xb7ad6b7169203331u64.to_be_bytes()))
        );
        assert!(context.sampled());
        assert_eq!(
            context.trace_state,
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        );
        let child = SpanId([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            context.traceparent(child),
            "00-0af7651916cd43dd8448eb211c80319c-0102030405060708-01"
        );
    }

    #[test]
    fn an_invalid_traceparent_starts_a_new_trace() {
        for bad in [
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "garbage",
        ] {
            let context = TraceContext::from_headers(&headers(bad));
            assert_eq!(context.parent, None, "{bad}");
            assert_ne!(context.trace_id, [0; 16]);
            assert!(context.sampled(), "a trace the gateway begins is sampled");
        }
        let future = TraceContext::from_headers(&headers(
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-more",
        ));
        assert!(
            future.parent.is_some(),
            "a later version's extra field is ignored"
        );
        assert!(!future.sampled());
    }

    #[test]
    fn ids_differ() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| SpanId::random()).collect();
        assert_eq!(ids.len(), 1000);
        assert_ne!(TraceContext::root().trace_id, TraceContext::root().trace_id);
    }
}
