//! The OTLP/HTTP exporter: spans are queued without waiting (a bounded queue; when it is full
//! the span is dropped and counted, `ctxkeeper_spans_dropped_total`), and one background task
//! sends them in batches as protobuf to the collector's `/v1/traces`. A collector that is down
//! or slow delays nothing but that task: requests only ever `try_send`.
//!
//! ```no_run
//! # async fn run() {
//! use std::sync::Arc;
//! use ctxkeeper_gateway::metrics::Metrics;
//! use ctxkeeper_gateway::telemetry::{Exporter, SpanId, SpanKind, SpanRecord, TelemetryConfig, TraceContext};
//!
//! let config = TelemetryConfig::from_endpoint("http://127.0.0.1:4318").unwrap();
//! let exporter = Exporter::start(&config, Arc::new(Metrics::default())).expect("in a runtime");
//! let trace = TraceContext::root();
//! exporter.record(SpanRecord::new(&trace, SpanId::random(), "chat m", SpanKind::Client, 0));
//! # }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::sync::mpsc;

use super::TelemetryConfig;
use super::span::SpanRecord;
use crate::metrics::Metrics;

/// How often a failing collector is reported in the log, at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The handle requests record spans through; the background task ends when it is dropped.
#[derive(Debug)]
pub struct Exporter {
    queue: mpsc::Sender<Span>,
    metrics: Arc<Metrics>,
}

impl Exporter {
    /// Starts the exporter's task on the current runtime; `None` outside one.
    pub fn start(config: &TelemetryConfig, metrics: Arc<Metrics>) -> Option<Exporter> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let client = reqwest::Client::builder()
            .timeout(config.export_timeout)
            .connect_timeout(config.export_timeout)
            .build()
            .ok()?;
        let (queue, receiver) = mpsc::channel(config.max_queue.max(1));
        let batch = Batcher {
            client,
            url: config.traces_url.clone(),
            headers: config.headers.clone(),
            resource: resource(config),
            max_batch: config.max_batch.max(1),
            delay: config.schedule_delay,
            metrics: metrics.clone(),
            last_warning: None,
        };
        runtime.spawn(batch.run(receiver));
        Some(Exporter { queue, metrics })
    }

    /// An exporter whose spans stay in the returned queue (tests read them there).
    #[cfg(test)]
    pub(crate) fn capturing(max_queue: usize) -> (Exporter, mpsc::Receiver<Span>) {
        let (queue, receiver) = mpsc::channel(max_queue);
        let metrics = Arc::new(Metrics::default());
        (Exporter { queue, metrics }, receiver)
    }

    /// Queues a finished span; never waits. A full queue drops it (counted).
    pub fn record(&self, span: SpanRecord) {
        if self.queue.try_send(span.into_proto()).is_err() {
            Metrics::add(&self.metrics.spans_dropped, 1);
        }
    }
}

/// The background task: collects spans into batches and sends each one.
struct Batcher {
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
    resource: Resource,
    max_batch: usize,
    delay: Duration,
    metrics: Arc<Metrics>,
    last_warning: Option<Instant>,
}

impl Batcher {
    async fn run(mut self, mut receiver: mpsc::Receiver<Span>) {
        let mut batch = Vec::with_capacity(self.max_batch);
        loop {
            // Wait for a first span, then up to the schedule delay for the batch to fill.
            if receiver.recv_many(&mut batch, self.max_batch).await == 0 {
                return;
            }
            let deadline = tokio::time::Instant::now() + self.delay;
            let mut closed = false;
            while batch.len() < self.max_batch {
                let room = self.max_batch - batch.len();
                tokio::select! {
                    received = receiver.recv_many(&mut batch, room) => {
                        if received == 0 {
                            closed = true;
                            break;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            self.send(std::mem::take(&mut batch)).await;
            if closed {
                return;
            }
        }
    }

    async fn send(&mut self, spans: Vec<Span>) {
        let count = spans.len() as u64;
        let body = encode(&self.resource, spans);
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/x-protobuf")
            .body(body);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let failure = match request.send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("the collector answered {}", response.status())),
            Err(err) if err.is_timeout() => Some("timed out".to_string()),
            Err(err) if err.is_connect() => Some("could not connect".to_string()),
            Err(err) => Some(err.to_string()),
        };
        match failure {
            None => Metrics::add(&self.metrics.spans_exported, count),
            Some(failure) => {
                Metrics::add(&self.metrics.spans_export_failed, count);
                if self
                    .last_warning
                    .is_none_or(|at| at.elapsed() >= WARN_EVERY)
                {
                    self.last_warning = Some(Instant::now());
                    tracing::warn!(url = %self.url, %failure, spans = count, "could not export spans (reported at most once a minute)");
                }
            }
        }
    }
}

/// One export request: the gateway's resource and scope around `spans`.
pub fn encode(resource: &Resource, spans: Vec<Span>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "ctxkeeper-gateway".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
    .encode_to_vec()
}

/// `service.name`, the gateway's version and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(config: &TelemetryConfig) -> Resource {
    let string = |key: &str, value: &str| KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..KeyValue::default()
    };
    let mut attributes = vec![
        string("service.name", &config.service_name),
        string("service.version", env!("CARGO_PKG_VERSION")),
        string("telemetry.sdk.name", "ctxkeeper-gateway"),
        string("telemetry.sdk.language", "rust"),
    ];
    for (key, value) in &config.resource {
        if !attributes.iter().any(|kv| &kv.key == key) {
            attributes.push(string(key, value));
        }
    }
    Resource {
        attributes,
        ..Resource::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{SpanId, SpanKind, TraceContext};

    #[test]
    fn an_export_request_decodes_with_its_resource_and_spans() {
        let mut config = TelemetryConfig::to("http://127.0.0.1:4318/v1/traces");
        config.service_name = "gw-test".into();
        config.resource = vec![("deployment.environment".into(), "test".into())];
        let trace = TraceContext::root();
        let mut span = SpanRecord::new(&trace, SpanId::random(), "chat m", SpanKind::Client, 5);
        span.int("gen_ai.usage.input_tokens", 42).end(9);
        let bytes = encode(&resource(&config), vec![span.into_proto()]);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        let resource_spans = &decoded.resource_spans[0];
        let keys: Vec<_> = resource_spans
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert!(
            keys.contains(&"service.name") && keys.contains(&"deployment.environment"),
            "{keys:?}"
        );
        let span = &resource_spans.scope_spans[0].spans[0];
        assert_eq!(span.name, "chat m");
        assert_eq!(span.trace_id, trace.trace_id.to_vec());
        assert_eq!((span.start_time_unix_nano, span.end_time_unix_nano), (5, 9));
    }

    #[tokio::test]
    async fn a_full_queue_drops_spans_and_counts_them_without_waiting() {
        // A collector that accepts connections and never answers: the first batch's export
        // hangs, so the queue fills.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let mut config = TelemetryConfig::to(&url);
        config.max_queue = 4;
        config.max_batch = 1;
        config.schedule_delay = Duration::ZERO;
        let metrics = Arc::new(Metrics::default());
        let exporter = Exporter::start(&config, metrics.clone()).unwrap();
        let trace = TraceContext::root();
        let started = Instant::now();
        for _ in 0..100 {
            let span = SpanRecord::new(&trace, SpanId::random(), "chat m", SpanKind::Client, 1);
            exporter.record(span);
        }
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "recording never waits"
        );
        let dropped = Metrics::get(&metrics.spans_dropped);
        assert!(
            (95..=96).contains(&dropped),
            "{dropped} of 100 dropped with room for 4 (+1 in flight)"
        );
        drop(listener);
    }
}
