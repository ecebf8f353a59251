//! Managed: a request whose context the gateway manages, from its session to the commit.
//!
//! 1. The session: the client's `x-ctxkeeper-session`, else the agent harness's own header,
//!    else a hash of the conversation's start ([`crate::identity`]), in the request's tenant.
//! 2. The fingerprints of its messages: those the resent prefix put back are reused, the
//!    rest come from the memo ([`crate::identity::FingerprintMemo`]).
//! 3. The step ([`crate::sessions::Sessions::begin`]): the session's context is brought up to
//!    the client's messages and prepared, in memory only; summaries are written on the
//!    request's own upstream as its caller when the gateway is so configured
//!    ([`crate::summarize::UpstreamRoute`], held by the step, never by the session).
//! 4. The body: the client's own bytes when the context is verbatim theirs and nothing was
//!    repaired or added, else the managed context emitted in the client's format with its
//!    current cache hints ([`crate::cache_hints::carry_cache_hints`]).
//! 5. Forwarding: a context-overflow answer ([`ctxkeeper_core::overflow::classify`]) is
//!    recovered by compacting harder and sending again, within the policy's bound and the
//!    session's circuit breaker; any other failure goes to the client as the upstream sent
//!    it, and the step is abandoned (nothing of it is stored or logged).
//! 6. The commit, once the upstream accepted: the state and the step's new log entries in
//!    one compare-and-swapped write ([`crate::sessions::Sessions::commit`]); then the
//!    request's messages are kept as the record the session's next request most likely
//!    resends ([`crate::resent`]).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use ctxkeeper_core::formats::Wire;
use ctxkeeper_core::model::{Message, Request as WireRequest};
use ctxkeeper_core::overflow;
use ctxkeeper_store::{SessionKey, StoreError};
use serde_json::Value;

use super::RequestError;
use super::deliver::{self, Report};
use super::interpret::Interpreted;
use super::upstream::Upstream;
use crate::Gateway;
use crate::cache_hints;
use crate::compaction_items::CompactionAnswer;
use crate::early::same_buffer;
use crate::error::ApiError;
use crate::identity;
use crate::resent::Reading;
use crate::sessions::events::GatewayEvent;
use crate::sessions::{Incoming, SessionError, SessionEvent, Ticket};
use crate::summarize::UpstreamRoute;
use crate::telemetry::RequestTrace;
use crate::telemetry::span::now_unix_nano;

/// Why a managed request could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    /// The session id the request names or derives is not a valid identifier.
    #[error("{0}")]
    SessionId(#[source] StoreError),
    /// The session could not take the step (store, archive, unreadable state).
    #[error("session {key}: {source}")]
    Step {
        key: SessionKey,
        #[source]
        source: SessionError,
    },
    /// A compaction the client asked for failed.
    #[error("session {key}: could not compact: {source}")]
    Compaction {
        key: SessionKey,
        #[source]
        source: SessionError,
    },
}

impl ManagedError {
    pub(super) fn into_api(self) -> ApiError {
        let api = match &self {
            ManagedError::SessionId(_) => ApiError::invalid_request(self.to_string()),
            // The cause may name files of the store or the workspace: it goes to the log
            // (and stays the error's source), the client learns only what failed.
            ManagedError::Step { key, source } => {
                ApiError::internal(format!("session {}: {}", key.session(), source.public()))
            }
            ManagedError::Compaction { key, source } => ApiError::internal(format!(
                "session {}: could not compact: {}",
                key.session(),
                source.public()
            )),
        };
        api.with_source(self)
    }
}

/// Above this share of the window used, a session keeps its last forwarded body for the
/// summary call (see [`crate::summarize`]): below the lowest trigger the economic rule
/// places (30 % of the window), and below the share a summary is prepared at.
const FORWARDED_KEPT_ABOVE_PCT: f64 = 20.0;

/// Requests with at least this many messages are freed on a blocking thread once answered.
const FREE_APART_FROM: usize = 256;

/// A managed request: its session and what is needed to emit it again after a recovery.
#[derive(Debug)]
struct Managed {
    key: SessionKey,
    wire: Wire,
    incoming: Incoming,
    /// The request without its messages (model, tools, every other field).
    template: WireRequest,
    /// The session step this request forwards, committed once the upstream accepted it.
    ticket: Ticket,
}

/// Runs a managed request through its session and the upstream.
pub(super) async fn run(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    interpreted: Interpreted,
    upstream: &mut Upstream,
) -> Result<Response, RequestError> {
    let Interpreted {
        wire,
        request:
            WireRequest {
                model,
                messages,
                tools,
                extra,
                hints,
            },
        body: bytes,
        client_bytes,
        rewritten,
        stream,
        client_compaction,
        repairs,
        tenant,
        header_session,
        pin_latest_user,
        focus,
        mut resent,
        _permit,
        ..
    } = interpreted;
    // The client's own session header, else the agent harness's, else the conversation's.
    let session = header_session
        .or_else(|| identity::harness_session(headers))
        .unwrap_or_else(|| identity::derived_session(model.as_deref(), &messages));
    let key = SessionKey::new(tenant, SessionKey::DEFAULT, SessionKey::DEFAULT, session)
        .map_err(ManagedError::SessionId)?;
    if let Some(trace) = upstream.trace.as_mut() {
        trace.conversation = Some(key.session().to_string());
    }
    // Summaries written upstream go there as this caller, with this request's headers.
    let route = gw.sessions.summarizes_upstream().then(|| {
        Arc::new(UpstreamRoute {
            client: gw.client.clone(),
            url: upstream.url.clone(),
            headers: upstream.headers.clone(),
            wire,
            model: model.clone(),
            tools: tools.clone(),
            timeout: gw.config.summary_timeout,
            trace: upstream.trace.as_ref().map(RequestTrace::for_summaries),
        })
    });
    let reused = resent.as_mut().filter(|_| repairs.is_none());
    let hashes = fingerprints(gw, key.tenant(), &messages, reused);
    // The client's own bytes go upstream only when nothing was repaired or added to them.
    let forwards_verbatim = repairs.is_none() && gw.config.context_providers.is_empty();
    let incoming = Incoming::fingerprinted(model.clone(), messages, hashes, &tools)
        .with_requested_output(requested_output(&extra))
        .with_requested_window(requested_window(headers))
        .with_pin_latest_user(pin_latest_user)
        .with_focus(focus)
        .with_route(route)
        .with_repairs(repairs)
        .with_forwards_verbatim(forwards_verbatim);
    let preparing = now_unix_nano();
    let mut step = gw
        .sessions
        .begin(&key, &incoming, &tools)
        .await
        .map_err(|source| ManagedError::Step { key, source })?;
    let mut managed = Managed {
        key: step.key.clone(),
        wire,
        incoming,
        template: WireRequest {
            model,
            messages: Vec::new(),
            tools,
            extra,
            hints,
        },
        ticket: step.ticket,
    };
    let report = Report {
        session: managed.key.session().to_string(),
        budget_used_pct: step.prepared.budget_used_pct,
        compacted: step.prepared.compacted,
        input_tokens: step.prepared.input_tokens,
    };
    // Request-time context (`[gateway] context_providers`), where the policy places it.
    let added = crate::assembly::complete(
        &gw.config.context_providers,
        gw.config.policy.provider_placement,
        gw.sessions.memory(),
        &managed.key,
        &mut step.prepared,
    )
    .await;
    if let Some(trace) = upstream.trace.as_mut() {
        trace.prepared_since(preparing);
        trace.conversation = Some(managed.key.session().to_string());
        trace.compacted = report.compacted;
        trace.context_tokens = Some(report.input_tokens);
        trace.budget_used_pct = Some(report.budget_used_pct);
        if trace.captures_content() {
            // A step that forwards the client's messages verbatim copies none out.
            let sent = if step.verbatim && step.prepared.messages.is_empty() {
                &managed.incoming.messages
            } else {
                &step.prepared.messages
            };
            trace.input_messages = Some(crate::telemetry::content::input_messages(sent));
        }
    }
    let body = if step.verbatim && !added && managed.incoming.repairs.is_none() {
        bytes
    } else {
        managed.emit(step.prepared.messages)
    };
    if client_compaction {
        return Ok(managed.answer_compaction(gw, body, stream, report).await?);
    }
    // Kept (shared, not copied) for the next summary call's cached prefix once the context
    // nears its trigger; below that no compaction is near.
    if gw.sessions.summarizes_upstream() && report.budget_used_pct >= FORWARDED_KEPT_ABOVE_PCT {
        managed.incoming.forwarded = Some(body.clone());
    }
    let forwarded_as_sent = same_buffer(&body, &client_bytes);
    let client_len = client_bytes.len();
    // The client's bytes are not needed past this point: held until the upstream answered,
    // they would sit beside the step's saved copies at the commit (`forward` drops `body` there).
    drop(client_bytes);
    let response = managed.forward(gw, upstream, body, report).await;
    // This request's messages are what the session's next request most likely resends.
    let kept = resent.filter(|_| !rewritten);
    managed.keep_for_next(gw, kept, forwarded_as_sent, client_len);
    response
}

/// The fingerprints of a request's messages: those of the resent prefix the reading put
/// back (when the history was not repaired), the others from the memo.
fn fingerprints(
    gw: &Gateway,
    tenant: &str,
    messages: &[Message],
    reading: Option<&mut Reading>,
) -> Vec<u128> {
    match reading.and_then(|reading| reading.known_fingerprints()) {
        Some(known) => {
            let (lead, end) = (known.lead, known.lead + known.fingerprints.len());
            let mut hashes = gw.fingerprints.fingerprints(tenant, &messages[..lead]);
            hashes.extend(known.fingerprints);
            hashes.extend(gw.fingerprints.fingerprints(tenant, &messages[end..]));
            hashes
        }
        None => gw.fingerprints.fingerprints(tenant, messages),
    }
}

/// The context window a request asks for in its headers (Anthropic's `context-1m-…` beta).
fn requested_window(headers: &HeaderMap) -> Option<u64> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(ctxkeeper_core::tokens::beta_window)
        .max()
}

/// The output budget a request asks for, in whichever field its API names it.
fn requested_output(extra: &serde_json::Map<String, Value>) -> Option<u64> {
    ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|field| extra.get(*field).and_then(Value::as_u64))
}

impl Managed {
    /// Emits the request with the managed `messages` in place of the client's, carrying the
    /// client's current cache hints.
    fn emit(&mut self, mut messages: Vec<Message>) -> Bytes {
        cache_hints::carry_cache_hints(
            &self.incoming.messages,
            &self.incoming.hashes,
            &mut messages,
        );
        let template = &mut self.template;
        template.messages = messages;
        let value = self.wire.emit_request(template);
        template.messages = Vec::new();
        // A Value always serializes.
        Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
    }

    /// Sends the request upstream, recovers from context overflows, commits the step the
    /// upstream accepted and delivers the answer.
    async fn forward(
        &mut self,
        gw: &Arc<Gateway>,
        upstream: &mut Upstream,
        mut body: Bytes,
        mut report: Report,
    ) -> Result<Response, RequestError> {
        let mut attempt = 0u32;
        loop {
            let answer = match upstream.send(gw, body.clone()).await {
                Ok(answer) => answer,
                Err(error) => {
                    gw.sessions.abandon(&self.key, self.ticket).await;
                    return Err(error.into());
                }
            };
            let Some((status_code, failure)) = answer.failure() else {
                // Accepted: the body is never sent again, so it is not held through the
                // commit, which writes the step's own copies.
                drop(std::mem::take(&mut body));
                let compactions = self.commit(gw).await;
                let mut trace = upstream.trace.take();
                if let Some(trace) = trace.as_mut() {
                    trace.compactions(&compactions, &gw.config.summarizer.name());
                }
                let finish = deliver::Finish {
                    key: self.key.clone(),
                    offered_tools: !self.template.tools.is_empty(),
                    route: self.incoming.route.clone(),
                };
                return Ok(deliver::answer(gw, answer, Some(finish), Some(&report), trace).await);
            };
            if let Some(found) = overflow::classify(status_code, &failure) {
                attempt += 1;
                let status = answer.status().as_u16();
                let recovering = now_unix_nano();
                upstream.retrying("context_length_exceeded", status);
                if let Some(retry) = self.recover(gw, &found, attempt, &mut report).await {
                    if let Some(trace) = upstream.trace.as_mut() {
                        trace.prepared_since(recovering);
                        trace.compacted = true;
                        trace.context_tokens = Some(report.input_tokens);
                        trace.budget_used_pct = Some(report.budget_used_pct);
                    }
                    body = retry;
                    continue;
                }
            }
            // The model never answered this step: nothing of it is stored or logged.
            gw.sessions.abandon(&self.key, self.ticket).await;
            let status = answer.status().as_u16();
            gw.sessions
                .announce(&self.key, &GatewayEvent::UpstreamError { status });
            // Any other error goes to the client exactly as the upstream sent it.
            let trace = upstream.trace.take();
            return Ok(deliver::answer(gw, answer, None, Some(&report), trace).await);
        }
    }

    /// Compacts harder after a context overflow; the body to send again, `None` when the
    /// recovery gave up.
    async fn recover(
        &mut self,
        gw: &Gateway,
        found: &overflow::Overflow,
        attempt: u32,
        report: &mut Report,
    ) -> Option<Bytes> {
        let recovered = gw
            .sessions
            .recover(
                &self.key,
                &self.incoming,
                &self.template.tools,
                found,
                attempt,
                &mut self.ticket,
            )
            .await;
        let mut prepared = match recovered {
            Ok(prepared) => prepared,
            Err(err) => {
                tracing::warn!(session = %self.key, attempt, %err, "overflow recovery gave up");
                let error = err.to_string();
                gw.sessions.announce(
                    &self.key,
                    &GatewayEvent::OverflowUnrecovered { attempt, error },
                );
                return None;
            }
        };
        crate::assembly::complete(
            &gw.config.context_providers,
            gw.config.policy.provider_placement,
            gw.sessions.memory(),
            &self.key,
            &mut prepared,
        )
        .await;
        tracing::info!(
            session = %self.key,
            attempt,
            tokens = prepared.input_tokens,
            "context overflow: compacted, retrying"
        );
        report.compacted = true;
        report.input_tokens = prepared.input_tokens;
        report.budget_used_pct = prepared.budget_used_pct;
        let retry = self.emit(prepared.messages);
        // The next summary call extends what went upstream last: the recovered body, never
        // the one that overflowed.
        if gw.sessions.summarizes_upstream() {
            self.incoming.forwarded = Some(retry.clone());
        }
        Some(retry)
    }

    /// Commits the step of a request the upstream accepted. The model's answer is delivered
    /// even when the store fails here: the client resends its history, so the next step
    /// commits these messages too.
    ///
    /// Returns the compaction events the step announced (none when the commit failed).
    async fn commit(&self, gw: &Gateway) -> Vec<SessionEvent> {
        let committed = gw
            .sessions
            .commit(&self.key, &self.incoming, &self.template.tools, self.ticket)
            .await;
        committed.unwrap_or_else(|err| {
            gw.metrics.commit_failed();
            tracing::warn!(session = %self.key, %err, "could not commit the session step; the next request carries its messages");
            Vec::new()
        })
    }

    /// Answers a Responses `compaction_trigger` in the provider's shape: the session is
    /// compacted (its summary written upstream on the request it would have forwarded,
    /// `body`) and the answer holds exactly one compaction item standing for the history.
    async fn answer_compaction(
        &self,
        gw: &Gateway,
        body: Bytes,
        stream: bool,
        mut report: Report,
    ) -> Result<Response, ManagedError> {
        let compacted = gw
            .sessions
            .compact_for_client(&self.key, self.ticket, &self.incoming, Some(body))
            .await;
        let text = match compacted {
            Ok(text) => text,
            Err(source) => {
                gw.sessions.abandon(&self.key, self.ticket).await;
                let key = self.key.clone();
                return Err(ManagedError::Compaction { key, source });
            }
        };
        self.commit(gw).await;
        report.compacted = true;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let id = xxhash_rust::xxh3::xxh3_64(format!("{}/{}", self.key, now.as_nanos()).as_bytes());
        let answer = CompactionAnswer {
            id: format!("{id:016x}"),
            model: self.incoming.model.clone().unwrap_or_default(),
            output_tokens: text.len() as u64 / 4,
            text,
            input_tokens: report.input_tokens,
            created_at: now.as_secs(),
        };
        Ok(deliver::compaction(&answer, stream, &report))
    }

    /// Keeps this request's messages as the record the session's next request most likely
    /// resends (`reading`, unless the body was rewritten or the history repaired), and frees
    /// a long history off the way to the client.
    fn keep_for_next(
        mut self,
        gw: &Gateway,
        reading: Option<Reading>,
        forwarded_as_sent: bool,
        bytes: usize,
    ) {
        let mut freed = Vec::new();
        if let Some(reading) = reading
            && self.incoming.repairs.is_none()
            && let Some(mut record) = reading.record(
                std::mem::take(&mut self.incoming.messages),
                std::mem::take(&mut self.incoming.hashes),
                bytes,
            )
        {
            record.forwarded_as_sent = forwarded_as_sent;
            freed = gw.resent.put(reading.key, record);
        }
        // Freeing a long history's messages takes a while: not on the way to the client.
        let freeing: usize = freed
            .iter()
            .map(|record| record.messages.len())
            .sum::<usize>()
            + self.incoming.messages.len();
        if freeing >= FREE_APART_FROM {
            tokio::task::spawn_blocking(move || drop((self, freed)));
        }
    }
}
