//! The admin API: its token, and a tenant token that stays in its tenant.

use super::*;
use crate::common::{json_of, post_chat};

#[tokio::test]
async fn the_admin_api_needs_its_token_and_stays_in_its_tenant() {
    let (upstream, _dir, disabled) = mock_and_gateway(128_000).await;
    let answer = client()
        .get(disabled.url("/admin/sessions"))
        .header("authorization", "Bearer anything")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    assert!(answer.text().await.unwrap().contains("--admin-token"));

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir, &upstream.anthropic_base_url());
    cfg.admin_token = Some("admin-secret".into());
    cfg.tenants = TenantRule::default()
        .with_token("acme", "acme-token-1")
        .unwrap()
        .with_token("globex", "globex-token-1")
        .unwrap();
    let gw = start(cfg).await;
    let chat = post_chat(
        &gw,
        &[
            ("authorization", KEY),
            ("x-ctxkeeper-tenant-token", "acme-token-1"),
            ("x-ctxkeeper-session", "ticket-7"),
        ],
        &json!({"model": "gpt-4o", "messages": chat_history(2, 200)}),
    )
    .await;
    assert_eq!(chat.status(), 200);

    let admin = |method: reqwest::Method, path: &str, tenant: &str, token: &str| {
        client()
            .request(method, gw.url(path))
            .header("authorization", format!("Bearer {token}"))
            .header("x-ctxkeeper-tenant", tenant)
    };
    // A GET in `tenant` as `token`, and the same read as its JSON body.
    let get = |path: &str, tenant: &str, token: &str| {
        let request = admin(reqwest::Method::GET, path, tenant, token);
        async move { request.send().await.unwrap() }
    };
    let read = |path: &str, tenant: &str, token: &str| {
        json_of::<Value>(admin(reqwest::Method::GET, path, tenant, token))
    };
    let wrong = get("/admin/sessions", "acme", "nope").await;
    assert_eq!(wrong.status(), 401);
    let other = read("/admin/sessions", "globex", "admin-secret").await;
    assert_eq!(other["sessions"], json!([]), "another tenant sees nothing");
    let listed = read("/admin/sessions", "acme", "admin-secret").await;
    assert_eq!(listed["sessions"][0]["id"], "ticket-7");
    let missing = get("/admin/sessions/ticket-7", "globex", "admin-secret").await;
    assert_eq!(missing.status(), 404);

    let stats = read("/admin/sessions/ticket-7", "acme", "admin-secret").await;
    assert_eq!(stats["messages"], chat_history(2, 200).len());
    assert_eq!(stats["log_len"], chat_history(2, 200).len());

    // A tenant token reaches its own tenant, and no other.
    let own = read("/admin/sessions", "acme", "acme-token-1").await;
    assert_eq!(own["sessions"][0]["id"], "ticket-7");
    let crossing = get("/admin/sessions/ticket-7", "acme", "globex-token-1").await;
    assert_eq!(crossing.status(), 403);
    let scoped: Value = json_of(
        client()
            .get(gw.url("/admin/sessions"))
            .header("authorization", "Bearer globex-token-1"),
    )
    .await;
    assert_eq!(
        scoped["sessions"],
        json!([]),
        "globex's token lists globex only"
    );

    let patch = |body: &'static str| {
        admin(
            reqwest::Method::PATCH,
            "/admin/sessions/ticket-7/policy",
            "acme",
            "admin-secret",
        )
        .body(body)
    };
    let bad = patch("trigger_ratio = 0.99").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("trigger_ratio"));
    let good = patch(r#"{"keep_recent_rounds": 5}"#)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(good.status(), 200);
    let policy = read("/admin/sessions/ticket-7/policy", "acme", "admin-secret").await;
    assert_eq!(policy["effective"]["keep_recent_rounds"], 5);

    let hits = read(
        "/admin/sessions/ticket-7/search?q=rounding",
        "acme",
        "admin-secret",
    )
    .await;
    assert!(!hits["hits"].as_array().unwrap().is_empty(), "{hits}");

    let cleared = admin(
        reqwest::Method::POST,
        "/admin/sessions/ticket-7/clear",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(cleared.status(), 200);
    let stats = read("/admin/sessions/ticket-7", "acme", "admin-secret").await;
    assert_eq!(stats["messages"], 0);
    assert_eq!(
        stats["log_len"],
        chat_history(2, 200).len(),
        "the log stays"
    );
    assert_eq!(stats["policy_overrides"], "keep_recent_rounds = 5\n");
}
