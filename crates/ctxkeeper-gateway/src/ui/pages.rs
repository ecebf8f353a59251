//! The console's pages, rendered with maud: every interpolated value is HTML-escaped, so
//! session content (a tool output holding `<script>`) shows as text. The one exception is
//! the chart's SVG, which [`super::chart`] builds from numbers only.

use std::time::{Duration, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use ctxkeeper::snapshot::Snapshot;
use ctxkeeper_store::archive::ArchiveRef;
use ctxkeeper_store::{SearchQuery, SessionFilter, SessionInfo, SessionKey, TenantInfo};
use futures_util::StreamExt;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::chart::{self, thousands};
use super::metrics_figures;
use super::{ARCHIVE_PAGE, Caller, Console, PageError, enc};
use crate::sessions::timeline::{CompactionRecord, Timeline, Totals};

/// Compactions listed per page of a session.
const COMPACTIONS_PER_PAGE: usize = 20;
/// Archived items linked per compaction before "and N more".
const REFS_SHOWN: usize = 50;
/// Hits shown per source on the search page.
const SEARCH_LIMIT: usize = 25;
/// Why the standalone console does not change standing orders, and where to instead.
pub(super) const READ_ONLY_ORDERS: &str = "Standing orders are read-only in the standalone \
     console (ctxkeeper ui): the gateway serving the session owns its state, and an edit made \
     here would race it. Change them in that gateway's console or through its admin API, \
     PATCH /admin/sessions/{id}/orders/{n}.";
/// Longest search accepted, in characters.
const MAX_QUERY: usize = 200;
/// Tenants listed on the admin's sessions page, most recently active first.
const TENANTS_SHOWN: usize = 200;
/// Session states read at once for the sessions and totals pages.
const LOADS_IN_FLIGHT: usize = 8;

fn page(
    title: &str,
    tenant: Option<&str>,
    events: Option<String>,
    content: Markup,
) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · ctxkeeper" }
                link rel="stylesheet" href="/ui/assets/console.css";
                script src="/ui/assets/console.js" defer {}
            }
            body data-events=[events] {
                header.top {
                    a.brand href="/ui/" { "ctxkeeper" }
                    @if let Some(tenant) = tenant {
                        nav {
                            a href={ "/ui/t/" (enc(tenant)) "/sessions" } { "Sessions" }
                            a href={ "/ui/t/" (enc(tenant)) "/totals" } { "Totals" }
                            span.tenant { "tenant " code { (tenant) } }
                        }
                        form.logout method="post" action="/ui/logout" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (content) }
            }
        }
    };
    Html(markup.into_string())
}

/// The login form.
pub(super) fn login(message: Option<&str>) -> Html<String> {
    page(
        "Sign in",
        None,
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(message) = message { p.notice { (message) } }
            form.login method="post" action="/ui/login" {
                label for="token" { "Admin or tenant token" }
                input #token type="password" name="token" autocomplete="off" required;
                button type="submit" { "Open the console" }
            }
        },
    )
}

/// An error page.
pub(super) fn error(status: StatusCode, message: &str) -> Response {
    let body = page(
        status.canonical_reason().unwrap_or("Error"),
        None,
        None,
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p.notice { (message) }
            p { a href="/ui/" { "Back to the console" } }
        },
    );
    (status, body).into_response()
}

fn when(ms: i64) -> String {
    let Ok(ms) = u64::try_from(ms) else {
        return "—".into();
    };
    let time = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replace('T', " ")
        .replace('Z', " UTC")
}

fn pct(tokens: u64, window: u64) -> String {
    if window == 0 {
        return "—".into();
    }
    format!("{:.0}%", tokens as f64 * 100.0 / window as f64)
}

pub(super) fn session_href(key: &SessionKey) -> String {
    format!(
        "/ui/t/{}/sessions/{}",
        enc(key.tenant()),
        enc(key.session())
    )
}

/// One row of the sessions page.
struct Row {
    info: SessionInfo,
    timeline: Timeline,
}

impl Row {
    fn window_use(&self) -> Option<f64> {
        let last = self.timeline.last()?;
        (last.window() > 0).then(|| last.tokens() as f64 / last.window() as f64)
    }
}

/// The timelines of every session of a tenant (read concurrently).
async fn rows(console: &Console, tenant: &str) -> Result<Vec<Row>, PageError> {
    let store = console.store().clone();
    let infos = store.list(&SessionFilter::tenant(tenant)).await?;
    let rows = futures_util::stream::iter(infos)
        .map(|info| {
            let store = store.clone();
            async move {
                let stored = store.load(&info.key).await?;
                let timeline = stored
                    .map(|v| Timeline::read(&v.state.extensions, &v.state.trail))
                    .unwrap_or_default();
                Ok::<_, PageError>(Row { info, timeline })
            }
        })
        .buffer_unordered(LOADS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    rows.into_iter().collect()
}

/// Every tenant holding sessions, for the admin (the admin token, or an open loopback
/// console): a session a newcomer's agent wrote sits under its API key's tenant (`key-…`),
/// not under `default` where the console opens. Never read for a tenant token. A store that
/// cannot list its tenants leaves the section out rather than fail the page.
async fn tenant_list(console: &Console, caller: Caller) -> Option<Vec<TenantInfo>> {
    if !caller.admin {
        return None;
    }
    match console.store().tenants().await {
        Ok(tenants) => Some(tenants),
        Err(err) => {
            tracing::warn!(error = %err, "console: cannot list the store's tenants");
            None
        }
    }
}

fn tenants_section(current: &str, tenants: &[TenantInfo], empty_here: bool) -> Markup {
    let elsewhere = tenants.iter().filter(|t| t.tenant != current).count();
    html! {
        section #tenants {
            h2 { "Tenants" }
            @if empty_here && elsewhere > 0 {
                p.notice #sessions-elsewhere {
                    "No sessions in tenant " code { (current) } ". An agent's sessions are filed \
                     under the tenant of its API key (" code { "key-…" } "); open one below."
                }
            }
            @if tenants.is_empty() {
                p.muted { "No tenant holds sessions yet." }
            } @else {
                table.tenants {
                    thead { tr { th { "Tenant" } th { "Sessions" } th { "Last activity" } } }
                    tbody {
                        @for info in tenants.iter().take(TENANTS_SHOWN) {
                            tr.tenant {
                                td {
                                    a.tenant-link.active[info.tenant == current]
                                        href={ "/ui/t/" (enc(&info.tenant)) "/sessions" } { (info.tenant) }
                                }
                                td.num { (thousands(info.sessions)) }
                                td { (when(info.updated_at_ms)) }
                            }
                        }
                    }
                }
                @if tenants.len() > TENANTS_SHOWN {
                    p.muted {
                        "and " (tenants.len() - TENANTS_SHOWN) " less recently active tenants \
                         (ctxkeeper sessions tenants lists them all)"
                    }
                }
            }
        }
    }
}

pub(super) async fn sessions(
    console: &Console,
    caller: Caller,
    tenant: &str,
    sort: Option<&str>,
    query: Option<&str>,
) -> Result<Response, PageError> {
    let mut rows = rows(console, tenant).await?;
    let tenants = tenant_list(console, caller).await;
    let empty_here = rows.is_empty();
    let query = query.map(str::trim).filter(|q| !q.is_empty());
    if let Some(q) = query {
        let q = q.to_lowercase();
        rows.retain(|row| {
            row.info.key.session().to_lowercase().contains(&q)
                || row
                    .timeline
                    .model
                    .as_deref()
                    .is_some_and(|m| m.to_lowercase().contains(&q))
        });
    }
    let sort = sort.unwrap_or("activity");
    match sort {
        "id" => rows.sort_by(|a, b| a.info.key.session().cmp(b.info.key.session())),
        "model" => rows.sort_by(|a, b| a.timeline.model.cmp(&b.timeline.model)),
        "requests" => rows.sort_by_key(|r| std::cmp::Reverse(r.timeline.totals.requests)),
        "window" => rows.sort_by(|a, b| {
            b.window_use()
                .unwrap_or(-1.0)
                .total_cmp(&a.window_use().unwrap_or(-1.0))
        }),
        "compactions" => rows.sort_by_key(|r| std::cmp::Reverse(r.timeline.totals.compactions)),
        "shed" => rows.sort_by_key(|r| std::cmp::Reverse(r.timeline.totals.tokens_shed)),
        "saved" => rows.sort_by_key(|r| std::cmp::Reverse(r.timeline.totals.billed_saved())),
        _ => rows.sort_by_key(|r| std::cmp::Reverse(r.info.updated_at_ms)),
    }
    let base = format!("/ui/t/{}/sessions", enc(tenant));
    let sort_link = |key: &str, label: &str| -> Markup {
        let mut href = format!("{base}?sort={key}");
        if let Some(q) = query {
            href.push_str("&q=");
            href.push_str(&enc(q));
        }
        html! {
            th { a.sort.active[key == sort] href=(href) { (label) } }
        }
    };
    let content = html! {
        h1 { "Sessions" }
        form.search method="get" action=(base) {
            input type="hidden" name="sort" value=(sort);
            input #filter type="search" name="q" value=[query] placeholder="filter by session or model";
            button type="submit" { "Filter" }
        }
        p.count { (rows.len()) " sessions" }
        @if let Some(tenants) = &tenants {
            @if empty_here { (tenants_section(tenant, tenants, true)) }
        }
        table #sessions {
            thead { tr {
                (sort_link("id", "Session"))
                (sort_link("activity", "Last activity"))
                (sort_link("model", "Model"))
                (sort_link("requests", "Requests"))
                (sort_link("window", "Window use"))
                (sort_link("compactions", "Compactions"))
                (sort_link("shed", "Tokens shed"))
                (sort_link("saved", "Billed input saved"))
            } }
            tbody {
                @for row in &rows {
                    @let totals = &row.timeline.totals;
                    tr.session {
                        td { a.session-link href=(session_href(&row.info.key)) { (row.info.key.session()) } }
                        td { (when(row.info.updated_at_ms)) }
                        td { (row.timeline.model.as_deref().unwrap_or("—")) }
                        td.num { (thousands(totals.requests)) }
                        td.num { (row.timeline.last().map_or("—".into(), |l| pct(l.tokens(), l.window()))) }
                        td.num { (thousands(totals.compactions)) }
                        td.num { (thousands(totals.tokens_shed)) }
                        td.num { (thousands(totals.billed_saved())) }
                    }
                }
            }
        }
        @if let Some(tenants) = &tenants {
            @if !empty_here { (tenants_section(tenant, tenants, false)) }
        }
    };
    Ok(page("Sessions", Some(tenant), None, content).into_response())
}

/// The text of the context entry `pick` selects, if any.
fn entry_text(
    snapshot: &Snapshot,
    pick: impl Fn(&ctxkeeper_core::engine::EntryMeta) -> bool,
) -> Option<String> {
    snapshot
        .context
        .entries
        .iter()
        .rev()
        .find(|entry| pick(&entry.meta))
        .map(|entry| entry.message.text())
}

fn totals_table(totals: &Totals) -> Markup {
    let saved_tokens = totals
        .unmanaged_input_tokens
        .saturating_sub(totals.input_tokens);
    html! {
        table.totals {
            tbody {
                tr { th { "Requests" } td.num { (thousands(totals.requests)) } }
                tr { th { "Input tokens sent" } td.num { (thousands(totals.input_tokens)) } }
                tr { th { "Input tokens unmanaged" } td.num { (thousands(totals.unmanaged_input_tokens)) } }
                tr { th { "Input tokens saved" } td.num.saved { (thousands(saved_tokens)) } }
                tr { th { "Billed input (uncached + 0.1 × cached)" } td.num { (thousands(totals.billed())) } }
                tr { th { "Billed input unmanaged" } td.num { (thousands(totals.billed_unmanaged())) } }
                tr { th { "Billed input saved" } td.num.saved { (thousands(totals.billed_saved())) } }
                tr { th { "Compactions" } td.num { (thousands(totals.compactions)) } }
                tr { th { "Tokens shed" } td.num { (thousands(totals.tokens_shed)) } }
                tr { th { "Overflow recoveries" } td.num { (thousands(totals.overflow_recoveries)) } }
                tr { th { "Degraded summaries" } td.num { (thousands(totals.degraded_summaries)) } }
            }
        }
    }
}

fn compaction_item(key: &SessionKey, number: u64, compaction: &CompactionRecord) -> Markup {
    let archive = format!("{}/archive?ref=", session_href(key));
    html! {
        details.compaction id={ "compaction-" (number) } {
            summary {
                "#" (number) " at request " (compaction.step) " · " (compaction.reason) ": "
                (thousands(compaction.tokens_before)) " → " (thousands(compaction.tokens_after)) " tokens, "
                (compaction.messages_before) " → " (compaction.messages_after) " messages"
            }
            dl {
                dt { "When" } dd { (when(compaction.at_ms)) }
                dt { "Trigger" } dd { (compaction.reason) }
                @if !compaction.strategy.is_empty() { dt { "Strategy" } dd { (compaction.strategy) } }
                dt { "Stages" } dd { (if compaction.stages.is_empty() { "—".to_string() } else { compaction.stages.join(", ") }) }
                dt { "Tokens" } dd { (thousands(compaction.tokens_before)) " → " (thousands(compaction.tokens_after)) }
                dt { "Messages" } dd { (compaction.messages_before) " → " (compaction.messages_after) }
                @if compaction.summary_degraded { dt { "Summary" } dd.warn { "degraded (the summarizer failed; a lossy fallback was used)" } }
            }
            @if compaction.archive_refs.is_empty() {
                p.muted { "Nothing archived." }
            } @else {
                p { (compaction.archive_refs.len()) " archived items:" }
                ul.archived {
                    @for reference in compaction.archive_refs.iter().take(REFS_SHOWN) {
                        li { a.archive-link href={ (archive) (enc(reference)) } { (reference) } }
                    }
                }
                @if compaction.archive_refs.len() > REFS_SHOWN {
                    p.muted { "and " (compaction.archive_refs.len() - REFS_SHOWN) " more (search the archive to reach them)" }
                }
            }
        }
    }
}

pub(super) async fn session(
    console: &Console,
    key: &SessionKey,
    page_number: usize,
) -> Result<Response, PageError> {
    let stored = console.store().load(key).await?.ok_or_else(|| {
        PageError::NotFound(format!("no session {:?} in this tenant", key.session()))
    })?;
    let snapshot = Snapshot::decode(stored.state)
        .map_err(|e| PageError::Store(format!("session {key}: {e}")))?;
    let timeline = Timeline::read(&snapshot.extensions, &snapshot.journal);
    let summary = entry_text(&snapshot, |m| m.summary);
    let capsule = entry_text(&snapshot, |m| m.capsule.is_some());
    let href = session_href(key);
    let totals = &timeline.totals;
    let records = timeline.compactions.len();
    let pages = records.div_ceil(COMPACTIONS_PER_PAGE).max(1);
    let page_number = page_number.clamp(1, pages);
    // Newest first; numbered over every compaction the session ever ran.
    let first_number = totals.compactions.saturating_sub(records as u64) + 1;
    let shown: Vec<(u64, &CompactionRecord)> = timeline
        .compactions
        .iter()
        .enumerate()
        .rev()
        .skip((page_number - 1) * COMPACTIONS_PER_PAGE)
        .take(COMPACTIONS_PER_PAGE)
        .map(|(i, c)| (first_number + i as u64, c))
        .collect();
    let context_tokens = timeline.last().map(|l| (l.tokens(), l.window()));
    let content = html! {
        h1 { "Session " code #session-id { (key.session()) } }
        p.meta {
            "model " strong { (timeline.model.as_deref().unwrap_or("—")) }
            " · " (snapshot.context.appended) " messages logged · "
            (snapshot.context.entries.len()) " in context"
            @if let Some((tokens, window)) = context_tokens {
                " · last request " (thousands(tokens)) " tokens (" (pct(tokens, window)) " of the window)"
            }
        }
        section.chart {
            h2 { "Input tokens per request" }
            (PreEscaped(chart::svg(&timeline)))
            p.legend {
                span.key.managed { "sent" } span.key.unmanaged { "unmanaged history" }
                span.key.window { "window" } span.key.compaction { "compaction" }
            }
        }
        section.figures { h2 { "Totals" } (totals_table(totals)) }
        section {
            h2 { "Search the log and the archive" }
            form.search method="get" action={ (href) "/search" } {
                input #q type="search" name="q" maxlength=(MAX_QUERY) placeholder="text to find" required;
                button type="submit" { "Search" }
            }
        }
        section.live {
            h2 { "Live" }
            p {
                label { input #follow type="checkbox"; " reload on each new request" }
                " " span #live-status.muted { "connecting…" }
            }
            ul #live {}
        }
        section {
            h2 { "Current summary" }
            @match &summary {
                Some(text) => pre #summary.text { "\n" (text) },
                None => p.muted { "No summary yet." },
            }
            h2 { "Capsule" }
            @match &capsule {
                Some(text) => pre #capsule.text { "\n" (text) },
                None => p.muted { "No capsule." },
            }
        }
        (orders_section(&snapshot, key, console.edits()))
        section #compactions {
            h2 { "Compactions (" (totals.compactions) ")" }
            @if shown.is_empty() { p.muted { "No compaction yet." } }
            @for (number, compaction) in &shown { (compaction_item(key, *number, compaction)) }
            @if pages > 1 {
                nav.pager {
                    @if page_number > 1 { a rel="prev" href={ (href) "?page=" (page_number - 1) } { "← newer" } }
                    span { "page " (page_number) " of " (pages) }
                    @if page_number < pages { a rel="next" href={ (href) "?page=" (page_number + 1) } { "older →" } }
                }
            }
        }
    };
    let events = format!("{href}/events");
    Ok(page(
        &format!("Session {}", key.session()),
        Some(key.tenant()),
        Some(events),
        content,
    )
    .into_response())
}

/// The session's standing orders: what the user set for the rest of the session, whether
/// each still holds, and (with `editable`, inside the gateway) a form per order to change
/// that.
fn orders_section(snapshot: &Snapshot, key: &SessionKey, editable: bool) -> Markup {
    let orders = snapshot
        .context
        .capsule()
        .map(|c| c.orders.orders.as_slice())
        .unwrap_or_default();
    let state = |o: &ctxkeeper_core::orders::StandingOrder| -> String {
        match (o.withdrawn, o.superseded_by, o.pinned) {
            (true, _, _) => "withdrawn".into(),
            (_, Some(by), _) => format!("replaced (message {by})"),
            (_, None, true) => "current, pinned".into(),
            _ => "current".into(),
        }
    };
    // Only the buttons that change something: (action, label).
    let buttons = |o: &ctxkeeper_core::orders::StandingOrder| {
        [
            if o.pinned {
                ("unpin", "Unpin")
            } else {
                ("pin", "Pin")
            },
            if o.is_current() {
                ("withdraw", "Withdraw")
            } else {
                ("reinstate", "Reinstate")
            },
        ]
    };
    let api = html! { code { "PATCH /admin/sessions/" (key.session()) "/orders/N" } };
    let href = session_href(key);
    html! {
        section #orders {
            h2 { "Standing orders (" (orders.iter().filter(|o| o.is_current()).count()) " current)" }
            @if orders.is_empty() {
                p.muted { "None read yet: the capsule reads them at the session's first compaction." }
            } @else {
                table {
                    thead { tr {
                        th { "#" } th { "Kind" } th { "State" } th { "Statement" } th { "Message" }
                        @if editable { th { "Change" } }
                    } }
                    tbody {
                        @for (index, order) in orders.iter().enumerate() {
                            tr.current[order.is_current()] {
                                td { (index) }
                                td { (order.kind.as_str()) }
                                td { (state(order)) }
                                td { (order.text) }
                                td { (order.log_index) }
                                @if editable {
                                    td {
                                        form.order-actions method="post" action={ (href) "/orders/" (index) } {
                                            @for (action, label) in buttons(order) {
                                                button type="submit" name="action" value=(action) { (label) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if editable {
                    p.muted {
                        "Pin: never replaced automatically, and listed first when the capsule is short of room. "
                        "Withdraw: no longer current. Reinstate: current again, whatever replaced it. "
                        "The capsule shows a change from the next compaction. The admin API does the same: "
                        (api) " with " code { "{\"pinned\": true}" } " or " code { "{\"current\": false}" } "."
                    }
                } @else {
                    p.muted #orders-read-only {
                        "Read-only here: this console runs without the gateway that serves the session, "
                        "and an edit would race it. Pin, withdraw or reinstate one in that gateway's console, or with "
                        (api) " and " code { "{\"pinned\": true}" } " or " code { "{\"current\": false}" } "."
                    }
                }
            }
        }
    }
}

pub(super) async fn archived(
    console: &Console,
    key: &SessionKey,
    reference: &ArchiveRef,
    offset: u64,
) -> Result<Response, PageError> {
    let scope = key.archive_scope();
    let page_read = console
        .archive()
        .read(&scope, reference, offset, ARCHIVE_PAGE)
        .await?;
    let href = session_href(key);
    let archive = format!("{href}/archive?ref={}", enc(reference.as_str()));
    let end = page_read.offset + page_read.content.len() as u64;
    let content = html! {
        p.crumbs { a href=(href) { "← session " (key.session()) } }
        h1 { "Archived " code #reference { (reference.as_str()) } }
        p.meta {
            "bytes " (thousands(page_read.offset)) "–" (thousands(end)) " of " (thousands(page_read.total_bytes))
        }
        nav.pager {
            @if page_read.offset > 0 { a rel="first" href={ (archive) "&offset=0" } { "← first page" } }
            @if let Some(next) = page_read.next_offset { a rel="next" href={ (archive) "&offset=" (next) } { "next page →" } }
        }
        // The parser drops one newline right after <pre>: this one, not the content's own.
        pre #archived.text { "\n" (page_read.content) }
    };
    Ok(page(
        &format!("Archived {}", reference.as_str()),
        Some(key.tenant()),
        None,
        content,
    )
    .into_response())
}

pub(super) async fn search(
    console: &Console,
    key: &SessionKey,
    query: &str,
) -> Result<Response, PageError> {
    let query = query.trim();
    if query.chars().count() > MAX_QUERY {
        return Err(PageError::BadRequest(format!(
            "a search is at most {MAX_QUERY} characters"
        )));
    }
    let href = session_href(key);
    let archive = format!("{href}/archive?ref=");
    let (log_hits, archive_hits, problem) = if query.is_empty() {
        (Vec::new(), Vec::new(), None)
    } else {
        let mut request = SearchQuery::session(key.clone(), query);
        request.limit = SEARCH_LIMIT;
        let pattern = regex::RegexBuilder::new(&regex::escape(query))
            .case_insensitive(true)
            .build()
            .map_err(|e| PageError::BadRequest(e.to_string()))?;
        let scope = key.archive_scope();
        // The log's full-text index and the archive answer independently: ask both at once
        // (the archive's text from memory once a search read it: items never change).
        let (logged, archived) = tokio::join!(
            console.store().search(&request),
            console
                .archive_text()
                .grep(console.archive(), &scope, &pattern, SEARCH_LIMIT)
        );
        let mut problem = None;
        let log_hits = match logged {
            Ok(hits) => hits,
            Err(ctxkeeper_store::StoreError::InvalidInput(message)) => {
                problem = Some(message);
                Vec::new()
            }
            Err(err) => return Err(err.into()),
        };
        let archive_hits = archived?;
        (log_hits, archive_hits, problem)
    };
    let content = html! {
        p.crumbs { a href=(href) { "← session " (key.session()) } }
        h1 { "Search" }
        form.search method="get" action={ (href) "/search" } {
            input #q type="search" name="q" value=(query) maxlength=(MAX_QUERY) required;
            button type="submit" { "Search" }
        }
        @if let Some(problem) = &problem { p.notice { "The log search refused this text: " (problem) } }
        @if !query.is_empty() {
            section #archive-hits {
                h2 { "In the archive (" (archive_hits.len()) ")" }
                ul.hits {
                    @for hit in &archive_hits {
                        li.hit {
                            a.archive-link href={ (archive) (enc(hit.reference.as_str())) } { (hit.reference.as_str()) }
                            " line " (hit.line) ": " code { (clip(&hit.text, 300)) }
                        }
                    }
                }
            }
            section #log-hits {
                h2 { "In the session log (" (log_hits.len()) ")" }
                ul.hits {
                    @for hit in &log_hits {
                        li.hit { "message " (hit.seq) " · " (when(hit.at_ms)) ": " code { (hit.snippet) } }
                    }
                }
            }
        }
    };
    Ok(page("Search", Some(key.tenant()), None, content).into_response())
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

pub(super) async fn totals(
    console: &Console,
    caller: Caller,
    tenant: &str,
) -> Result<Response, PageError> {
    let rows = rows(console, tenant).await?;
    let mut totals = Totals::default();
    for row in &rows {
        totals.add(&row.timeline.totals);
    }
    let process = console
        .metrics()
        .filter(|_| caller.admin)
        .map(|metrics| metrics_figures(metrics));
    let content = html! {
        h1 { "Totals" }
        section #tenant-totals {
            h2 { "Tenant " code { (tenant) } " · " (rows.len()) " sessions" }
            (totals_table(&totals))
        }
        @if let Some(figures) = &process {
            section #process-totals {
                h2 { "This gateway, every tenant (as /metrics exports it)" }
                table.totals { tbody {
                    @for (name, value) in figures {
                        tr { th { code { (name) } } td.num { (thousands(*value)) } }
                    }
                } }
            }
        }
    };
    Ok(page("Totals", Some(tenant), None, content).into_response())
}
