//! The web console over HTTP: every page escapes session content, carries the strict
//! Content-Security-Policy, and is scoped to a tenant exactly like the admin API (the admin
//! token reaches every tenant, a tenant token only its own, no token only on loopback).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use common::{chat_history, client, config, filler, mock, start};
use ctxkeeper_core::tokens::Profiles;
use ctxkeeper_gateway::metrics::Metrics;
use ctxkeeper_gateway::tenancy::TenantRule;
use ctxkeeper_gateway::ui::{Access, CONTENT_SECURITY_POLICY, Console};
use serde_json::{Value, json};

const KEY: &str = "Bearer sk-console-test";
const HOSTILE: &str = "<script>alert(\"pwned\")</script><img src=x onerror=alert(2)>";

/// A tenant rule with a `NAME-token-1` token for each tenant named.
fn tenant_tokens(names: &[&str]) -> TenantRule {
    names.iter().fold(TenantRule::default(), |rule, name| {
        rule.with_token(name, &format!("{name}-token-1"))
            .expect("token")
    })
}

#[tokio::test]
async fn pages_escape_content_carry_the_policy_and_stay_in_their_tenant() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.admin_token = Some("admin-secret-1".into());
    cfg.tenants = tenant_tokens(&["acme", "globex"]);
    let gw = start(cfg).await;
    let mut messages = chat_history(2, 200);
    messages.push(
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_x",
        "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}}]}),
    );
    messages.push(json!({"role": "tool", "tool_call_id": "call_x", "content": HOSTILE}));
    let chat = client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", KEY)
        .header("x-ctxkeeper-tenant-token", "acme-token-1")
        .header("x-ctxkeeper-session", "xss-1")
        .json(&json!({"model": "gpt-4o", "messages": messages}))
        .send()
        .await
        .expect("chat");
    assert_eq!(chat.status(), 200);

    let get = |path: &str, token: Option<&str>| {
        let mut request = client().get(gw.url(path));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.send()
    };

    // The tenant's own token: the session is listed, its page has one chart point.
    let list = get("/ui/t/acme/sessions", Some("acme-token-1"))
        .await
        .expect("list");
    assert_eq!(list.status(), 200);
    assert_eq!(
        list.headers()["content-security-policy"],
        CONTENT_SECURITY_POLICY
    );
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    assert_eq!(list.headers()["x-content-type-options"], "nosniff");
    assert_eq!(list.headers()["cache-control"], "no-store");
    let body = list.text().await.expect("body");
    assert!(body.contains(">xss-1</a>"), "{body}");
    assert!(!body.contains("acme-token-1") && !body.contains("sk-console-test"));

    let page = get("/ui/t/acme/sessions/xss-1", Some("acme-token-1"))
        .await
        .expect("session")
        .text()
        .await
        .expect("body");
    assert!(page.contains(r#"data-points="1""#), "{page}");
    assert_eq!(page.matches(r#"<circle class="point""#).count(), 1);
    // The only script is the console's own file.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains(r#"<script src="/ui/assets/console.js" defer>"#));

    // A hostile tool output shows as text on the search page (log hit).
    let search = get(
        "/ui/t/acme/sessions/xss-1/search?q=pwned",
        Some("acme-token-1"),
    )
    .await
    .expect("search");
    assert_eq!(search.status(), 200);
    let found = search.text().await.expect("body");
    assert!(found.contains("&lt;script&gt;"), "{found}");
    assert!(!found.contains("<script>alert") && !found.contains("<img src=x"));

    // The admin token reaches the tenant too; the process totals are shown to it only.
    let totals = get("/ui/t/acme/totals", Some("admin-secret-1"))
        .await
        .expect("totals")
        .text()
        .await
        .expect("body");
    assert!(totals.contains(r#"id="process-totals""#));
    let tenant_totals = get("/ui/t/acme/totals", Some("acme-token-1"))
        .await
        .expect("totals")
        .text()
        .await
        .expect("body");
    assert!(tenant_totals.contains(r#"id="tenant-totals""#));
    assert!(!tenant_totals.contains(r#"id="process-totals""#));

    // Another tenant's token: refused on acme's pages, an empty list of its own.
    for path in [
        "/ui/t/acme/sessions",
        "/ui/t/acme/sessions/xss-1",
        "/ui/t/acme/sessions/xss-1/search?q=pwned",
        "/ui/t/acme/sessions/xss-1/events",
        "/ui/t/acme/totals",
    ] {
        let answer = get(path, Some("globex-token-1")).await.expect("refused");
        assert_eq!(answer.status(), 403, "{path}");
        assert!(!answer.text().await.expect("body").contains("pwned"));
    }
    let own = get("/ui/t/globex/sessions", Some("globex-token-1"))
        .await
        .expect("own");
    assert_eq!(own.status(), 200);
    assert!(!own.text().await.expect("body").contains("xss-1"));
    let missing = get("/ui/t/globex/sessions/xss-1", Some("globex-token-1"))
        .await
        .expect("missing");
    assert_eq!(missing.status(), 404);

    // No or wrong credentials: the login form.
    for token in [None, Some("wrong-token-123")] {
        let answer = get("/ui/t/acme/sessions", token).await.expect("login");
        assert_eq!(answer.status(), 401);
        assert!(
            answer
                .text()
                .await
                .expect("body")
                .contains(r#"name="token""#)
        );
    }

    // Hostile identifiers and references are refused, never read.
    let bad_tenant = get("/ui/t/..%2Facme/sessions", Some("admin-secret-1"))
        .await
        .expect("bad tenant");
    assert_eq!(bad_tenant.status(), 400);
    for reference in [
        "..%2F..%2Fglobex%2Fsessions%2Fx%2Ftool_result-call_0.txt",
        "%2Fetc%2Fpasswd",
        "sessions%2Fother%2Ftool_result-call_0.txt",
    ] {
        let answer = get(
            &format!("/ui/t/acme/sessions/xss-1/archive?ref={reference}"),
            Some("admin-secret-1"),
        )
        .await
        .expect("reference");
        assert!(
            answer.status() == 404 || answer.status() == 400,
            "{reference}: {}",
            answer.status()
        );
    }

    // The login form sets an HttpOnly, SameSite=Strict cookie that opens the pages.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let login = no_redirects
        .post(gw.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=acme-token-1")
        .send()
        .await
        .expect("login");
    assert_eq!(login.status(), 303);
    let forged = no_redirects
        .post(gw.url("/ui/login"))
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=acme-token-1")
        .send()
        .await
        .expect("forged login");
    assert_eq!(forged.status(), 403);
    assert!(forged.headers().get("set-cookie").is_none());
    assert_eq!(login.headers()["location"], "/ui/t/acme/sessions");
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let pair = cookie.split(';').next().expect("pair").to_string();
    let with_cookie = no_redirects
        .get(gw.url("/ui/t/acme/sessions"))
        .header("cookie", pair)
        .send()
        .await
        .expect("cookie page");
    assert_eq!(with_cookie.status(), 200);
    gw.stop().await;
}

#[tokio::test]
async fn without_a_token_the_console_is_open_on_loopback_only() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let gw = start(config(&dir, &upstream.anthropic_base_url())).await;
    let open = client()
        .get(gw.url("/ui/t/default/sessions"))
        .send()
        .await
        .expect("open");
    assert_eq!(open.status(), 200, "the test gateway listens on 127.0.0.1");
    let rebound = client()
        .get(gw.url("/ui/t/default/sessions"))
        .header("host", "attacker.example")
        .send()
        .await
        .expect("rebound");
    assert_eq!(
        rebound.status(),
        403,
        "a DNS name rebound to loopback is refused"
    );
    // Open without a cookie, so another site's form is refused by its origin alone; the
    // console's own form reaches the edit (here: a session that does not exist).
    let edit = |origin: String| {
        client()
            .post(gw.url("/ui/t/default/sessions/nobody/orders/0"))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("action=withdraw")
            .send()
    };
    let forged = edit("http://evil.example".into()).await.expect("forged");
    assert_eq!(forged.status(), 403);
    assert!(forged.text().await.expect("body").contains("another site"));
    let own = edit(format!("http://{}", gw.addr)).await.expect("own");
    assert_eq!(own.status(), 404);
    gw.stop().await;

    // The same console on a non-loopback address refuses every page.
    let store = ctxkeeper_store::open_store("memory://")
        .await
        .expect("store");
    let archive = ctxkeeper_store::open_archive(dir.path().to_str().expect("utf-8"))
        .await
        .expect("archive");
    let bus = ctxkeeper_store::open_event_bus("memory://")
        .await
        .expect("bus");
    let access = Access::new(None, TenantRule::default(), [0, 0, 0, 0].into());
    let console = Console::standalone(store, archive, bus, access);
    let served = Standalone::serve(console).await;
    let addr = served.addr;
    let refused = client()
        .get(format!("http://{addr}/ui/t/default/sessions"))
        .send()
        .await
        .expect("refused");
    assert_eq!(refused.status(), 403);
    assert!(
        refused
            .text()
            .await
            .expect("body")
            .contains("--admin-token")
    );
    served.stop().await;
}

/// A standalone console (`ctxkeeper ui`) served on a loopback port until [`Standalone::stop`].
struct Standalone {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Standalone {
    async fn serve(console: Console) -> Standalone {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(console.serve(listener, async move {
            let _ = stopped.await;
        }));
        Standalone { addr, stop, server }
    }

    /// The open loopback console (no token) over a running gateway's store and archive,
    /// as `ctxkeeper ui` serves it beside a gateway.
    async fn loopback_over(gw: &common::Running) -> Standalone {
        let bus = ctxkeeper_store::open_event_bus("memory://")
            .await
            .expect("bus");
        let console = Console::standalone(
            gw.gateway.sessions.store().clone(),
            gw.gateway.sessions.archive().clone(),
            bus,
            Access::new(None, TenantRule::default(), [127, 0, 0, 1].into()),
        );
        Standalone::serve(console).await
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.expect("join").expect("served");
    }
}

/// Order 0 of a session, as the admin API lists it.
async fn order_zero(gw: &common::Running, id: &str) -> Value {
    let listed: Value = client()
        .get(gw.url(&format!("/admin/sessions/{id}/orders")))
        .header("authorization", "Bearer acme-token-1")
        .send()
        .await
        .expect("orders")
        .json()
        .await
        .expect("json");
    listed["orders"][0].clone()
}

/// The buttons of order 0's row on the session page (the values they post).
fn row_zero_buttons(page: &str, id: &str) -> Vec<String> {
    let form = format!(r#"action="/ui/t/acme/sessions/{id}/orders/0""#);
    let start = page
        .find(&form)
        .unwrap_or_else(|| panic!("order 0 has a form: {page}"));
    let row = &page[start..];
    let row = &row[..row.find("</form>").expect("form closes")];
    row.split(r#"name="action" value=""#)
        .skip(1)
        .map(|rest| rest.split('"').next().expect("value").to_string())
        .collect()
}

/// The session page's buttons pin, withdraw and reinstate a standing order through the same
/// edit the admin API makes, and only from the console's own pages, for the caller's
/// tenant, inside the gateway; the standalone console shows the orders read-only.
#[tokio::test]
async fn standing_orders_are_edited_from_the_session_page() {
    const ID: &str = "orders-1";
    let upstream = mock(20_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.profiles = Profiles::from_toml_str(
        "[models.\"cc-model\"]\ncontext_window = 20000\ntokenizer = \"o200k_base\"\n",
    )
    .expect("profiles");
    cfg.tenants = tenant_tokens(&["acme", "globex"]);
    let gw = start(cfg).await;

    // The capsule reads the orders at the session's first compaction.
    let mut messages = vec![json!({"role": "user", "content":
        "Fix the failing invoice test. Never push to main. The release codename is KESTREL."})];
    for i in 0..40 {
        let id = format!("toolu_{i:04}");
        messages.push(
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": id,
            "name": "Bash", "input": {"command": format!("cat src/f{i}.rs")}}]}),
        );
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": id, "content": filler(i, 6_000)}]}));
        let response = client()
            .post(gw.url("/v1/messages"))
            .header("x-api-key", "sk-ant-console-orders-0123456789")
            .header("anthropic-version", "2023-06-01")
            .header("x-ctxkeeper-tenant-token", "acme-token-1")
            .header("x-ctxkeeper-session", ID)
            .json(&json!({"model": "cc-model", "max_tokens": 1000, "messages": messages,
                "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]}))
            .send()
            .await
            .expect("messages");
        assert_eq!(response.status(), 200, "step {i}");
        if !order_zero(&gw, ID).await.is_null() {
            break;
        }
    }
    assert!(Metrics::get(&gw.gateway.metrics.compactions) >= 1);
    let first = order_zero(&gw, ID).await;
    assert_eq!(first["current"], true, "{first}");
    assert_eq!(first["pinned"], false, "{first}");

    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let own = format!("http://{}", gw.addr);
    let post = |path: &str, origin: &str, token: &str, body: &str| {
        no_redirects
            .post(gw.url(path))
            .header("authorization", format!("Bearer {token}"))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string())
            .send()
    };
    let edit = |action: &str| {
        post(
            "/ui/t/acme/sessions/orders-1/orders/0",
            &own,
            "acme-token-1",
            &format!("action={action}"),
        )
    };
    let page = || async {
        client()
            .get(gw.url("/ui/t/acme/sessions/orders-1"))
            .header("authorization", "Bearer acme-token-1")
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("body")
    };

    // Only the buttons that change something, named for what they do.
    let before = page().await;
    assert_eq!(row_zero_buttons(&before, ID), ["pin", "withdraw"]);
    assert!(before.contains(">Pin</button>") && before.contains(">Withdraw</button>"));
    assert_eq!(before.matches("<script").count(), 1, "no inline script");

    let withdrawn = edit("withdraw").await.expect("withdraw");
    assert_eq!(withdrawn.status(), 303);
    assert_eq!(
        withdrawn.headers()["location"],
        "/ui/t/acme/sessions/orders-1#orders"
    );
    let order = order_zero(&gw, ID).await;
    assert_eq!(
        (&order["withdrawn"], &order["current"]),
        (&json!(true), &json!(false)),
        "{order}"
    );
    assert_eq!(row_zero_buttons(&page().await, ID), ["pin", "reinstate"]);

    assert_eq!(edit("reinstate").await.expect("reinstate").status(), 303);
    let order = order_zero(&gw, ID).await;
    assert_eq!(
        (&order["withdrawn"], &order["current"]),
        (&json!(false), &json!(true)),
        "{order}"
    );

    assert_eq!(edit("pin").await.expect("pin").status(), 303);
    assert_eq!(order_zero(&gw, ID).await["pinned"], true);
    assert_eq!(row_zero_buttons(&page().await, ID), ["unpin", "withdraw"]);
    let settled = order_zero(&gw, ID).await;

    // Refused or malformed, and nothing changes: (path, origin, token, body, status, what the
    // page says).
    let order = "/ui/t/acme/sessions/orders-1/orders/0";
    let own = own.as_str();
    #[rustfmt::skip]
    let cases: [(&str, &str, &str, &str, u16, &str); 10] = [
        // Another site's form, another tenant's token, no token.
        (order, "http://evil.example", "acme-token-1", "action=withdraw", 403, ""),
        (order, own, "globex-token-1", "action=withdraw", 403, ""),
        (order, own, "", "action=withdraw", 401, ""),
        // A position the session does not have, or no position at all.
        ("/ui/t/acme/sessions/orders-1/orders/999", own, "acme-token-1", "action=withdraw", 400, "no standing order 999"),
        ("/ui/t/acme/sessions/orders-1/orders/first", own, "acme-token-1", "action=withdraw", 400, ""),
        // Unknown or missing actions.
        (order, own, "acme-token-1", "action=explode", 400, "unknown action"),
        (order, own, "acme-token-1", "", 400, "unknown action"),
        (order, own, "acme-token-1", "colour=red", 400, "unknown action"),
        // An unknown session, and an id that is no identifier.
        ("/ui/t/acme/sessions/nobody/orders/0", own, "acme-token-1", "action=withdraw", 404, "no session"),
        ("/ui/t/acme/sessions/..%2Fx/orders/0", own, "acme-token-1", "action=withdraw", 400, ""),
    ];
    for (path, origin, token, body, status, says) in cases {
        let answer = post(path, origin, token, body).await.expect("answer");
        assert_eq!(
            answer.status(),
            status,
            "{path} {origin} {token:?} {body:?}"
        );
        let page = answer.text().await.expect("body");
        assert!(page.contains(says), "{path} {body:?}: {page}");
    }
    assert_eq!(order_zero(&gw, ID).await, settled);

    // The standalone console over the same store: the orders read-only, the edit refused.
    let served = Standalone::loopback_over(&gw).await;
    let addr = served.addr;
    let standalone = client()
        .get(format!("http://{addr}/ui/t/acme/sessions/orders-1"))
        .send()
        .await
        .expect("standalone page")
        .text()
        .await
        .expect("body");
    assert!(standalone.contains("Never push to main."), "{standalone}");
    assert!(
        standalone.contains("<td>current, pinned</td>"),
        "the edit is in the store: {standalone}"
    );
    assert!(standalone.contains(r#"id="orders-read-only""#));
    assert!(standalone.contains("PATCH /admin/sessions/orders-1/orders/N"));
    assert!(
        !standalone.contains("order-actions")
            && !standalone.contains("<button type=\"submit\" name=\"action\"")
    );
    let refused = client()
        .post(format!(
            "http://{addr}/ui/t/acme/sessions/orders-1/orders/0"
        ))
        .header("origin", format!("http://{addr}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("action=withdraw")
        .send()
        .await
        .expect("standalone edit");
    assert_eq!(refused.status(), 405);
    assert_eq!(refused.headers()["allow"], "");
    let why = refused.text().await.expect("body");
    assert!(
        why.contains("read-only") && why.contains("PATCH /admin/sessions/"),
        "{why}"
    );
    assert_eq!(order_zero(&gw, ID).await, settled);
    served.stop().await;
    gw.stop().await;
}

/// A chat call through the gateway with the API key and `headers`, in session `id` (a tenant
/// token among them names the tenant; else the key's hash does).
async fn chat_as(gw: &common::Running, headers: &[(&str, &str)], id: &str) {
    let mut request = client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", KEY)
        .header("x-ctxkeeper-session", id);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = request
        .json(&json!({"model": "gpt-4o", "messages": chat_history(1, 100)}))
        .send()
        .await
        .expect("chat");
    assert_eq!(answer.status(), 200, "{id}");
}

/// The tenant links of a sessions page's tenant list (`None` when the page has none).
fn tenant_links(page: &str) -> Option<Vec<String>> {
    let section = &page[page.find(r#"<section id="tenants">"#)?..];
    let section = &section[..section.find("</section>").expect("section closes")];
    Some(
        section
            .split(r#"href="/ui/t/"#)
            .skip(1)
            .map(|rest| rest.split('/').next().expect("tenant").to_string())
            .collect(),
    )
}

/// A newcomer's agent files its sessions under its API key's tenant while the console opens
/// on `default`: the admin (token, or the open loopback console) sees every tenant with its
/// session count and a link there.
#[tokio::test]
async fn the_admin_sees_every_tenant_with_sessions_and_a_link_to_it() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.admin_token = Some("admin-secret-1".into());
    cfg.tenants = tenant_tokens(&["acme"]);
    let gw = start(cfg).await;
    chat_as(&gw, &[], "first-run").await;
    chat_as(&gw, &[], "second-run").await;
    chat_as(
        &gw,
        &[("x-ctxkeeper-tenant-token", "acme-token-1")],
        "acme-run",
    )
    .await;
    let tenants = gw
        .gateway
        .sessions
        .store()
        .tenants()
        .await
        .expect("tenants");
    let key_tenant = tenants
        .iter()
        .find(|t| t.tenant.starts_with("key-"))
        .expect("the API key's tenant")
        .tenant
        .clone();

    // Where the console lands: `default`, empty; the tenants are listed with their counts.
    let page = client()
        .get(gw.url("/ui/t/default/sessions"))
        .header("authorization", "Bearer admin-secret-1")
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("body");
    assert!(page.contains(r#"id="sessions-elsewhere""#), "{page}");
    let mut links = tenant_links(&page).expect("the tenant list");
    links.sort();
    let mut expected = vec!["acme".to_string(), key_tenant.clone()];
    expected.sort();
    assert_eq!(links, expected, "{page}");
    let row = |tenant: &str| {
        let start = page
            .find(&format!(r#"href="/ui/t/{tenant}/sessions""#))
            .expect("row");
        let row = &page[start..];
        row[..row.find("</tr>").expect("row ends")].to_string()
    };
    assert!(
        row(&key_tenant).contains(r#"<td class="num">2</td>"#),
        "{page}"
    );
    assert!(row("acme").contains(r#"<td class="num">1</td>"#), "{page}");
    assert!(!page.contains("admin-secret-1") && !page.contains("sk-console-test"));

    // The link leads to the sessions; that page lists the tenants too, without the notice.
    let there = client()
        .get(gw.url(&format!("/ui/t/{key_tenant}/sessions")))
        .header("authorization", "Bearer admin-secret-1")
        .send()
        .await
        .expect("key tenant")
        .text()
        .await
        .expect("body");
    assert!(
        there.contains(">first-run</a>") && there.contains(">second-run</a>"),
        "{there}"
    );
    assert!(tenant_links(&there).is_some_and(|links| links.len() == 2));
    assert!(!there.contains(r#"id="sessions-elsewhere""#));

    // The open loopback console (no token configured) is the admin's too.
    let served = Standalone::loopback_over(&gw).await;
    let open = client()
        .get(format!("http://{}/ui/t/default/sessions", served.addr))
        .send()
        .await
        .expect("open console")
        .text()
        .await
        .expect("body");
    assert!(
        tenant_links(&open).is_some_and(|links| links.contains(&key_tenant)),
        "{open}"
    );
    served.stop().await;
    gw.stop().await;
}

/// A tenant token's pages never list or name another tenant, and other tenants' pages stay
/// closed to it.
#[tokio::test]
async fn a_tenant_token_does_not_see_other_tenants() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.admin_token = Some("admin-secret-1".into());
    cfg.tenants = tenant_tokens(&["acme", "globex", "initech"]);
    let gw = start(cfg).await;
    chat_as(
        &gw,
        &[("x-ctxkeeper-tenant-token", "acme-token-1")],
        "acme-run",
    )
    .await;
    chat_as(
        &gw,
        &[("x-ctxkeeper-tenant-token", "globex-token-1")],
        "globex-secret-run",
    )
    .await;
    chat_as(&gw, &[], "key-run").await;

    let get = |path: &str, token: &str| {
        client()
            .get(gw.url(path))
            .header("authorization", format!("Bearer {token}"))
            .send()
    };
    for path in ["/ui/t/acme/sessions", "/ui/t/acme/totals"] {
        let answer = get(path, "acme-token-1").await.expect("own page");
        assert_eq!(answer.status(), 200, "{path}");
        let page = answer.text().await.expect("body");
        assert!(tenant_links(&page).is_none(), "{path}: {page}");
        for other in ["globex", "key-", "default", "globex-secret-run"] {
            assert!(
                !page.contains(&format!("/ui/t/{other}")) && !page.contains(&format!(">{other}")),
                "{path} names {other}: {page}"
            );
        }
    }
    // An empty tenant of its own: still no word of the others.
    let empty = get("/ui/t/initech/sessions", "initech-token-1")
        .await
        .expect("empty tenant")
        .text()
        .await
        .expect("body");
    assert!(empty.contains("0 sessions"), "{empty}");
    assert!(tenant_links(&empty).is_none(), "{empty}");
    assert!(!empty.contains("sessions-elsewhere") && !empty.contains("globex"));
    for path in ["/ui/t/globex/sessions", "/ui/t/default/sessions"] {
        let refused = get(path, "acme-token-1").await.expect("refused");
        assert_eq!(refused.status(), 403, "{path}");
        assert!(
            !refused
                .text()
                .await
                .expect("body")
                .contains("globex-secret-run")
        );
    }
    // The admin's page of the same tenant does list them.
    let admin = get("/ui/t/acme/sessions", "admin-secret-1")
        .await
        .expect("admin")
        .text()
        .await
        .expect("body");
    assert_eq!(
        tenant_links(&admin).map(|links| links.len()),
        Some(3),
        "{admin}"
    );
    gw.stop().await;
}
