//! The admin API: its token, and a tenant token that stays in its tenant.

use super::*;

#[tokio::test]
async fn the_admin_api_needs_its_token_and_stays_in_its_tenant() {
    let upstream = mock(128_000).await;
    let dir = tempfile::tempdir().unwrap();
    let disabled = start(config(&dir, &upstream.anthropic_base_url())).await;
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
    let chat = client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", KEY)
        .header("x-ctxkeeper-tenant-token", "acme-token-1")
        .header("x-ctxkeeper-session", "ticket-7")
        .json(&json!({"model": "gpt-4o", "messages": chat_history(2, 200)}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);

    let admin = |method: reqwest::Method, path: &str, tenant: &str, token: &str| {
        client()
            .request(method, gw.url(path))
            .header("authorization", format!("Bearer {token}"))
            .header("x-ctxkeeper-tenant", tenant)
    };
    let wrong = admin(reqwest::Method::GET, "/admin/sessions", "acme", "nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let other: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions",
        "globex",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(other["sessions"], json!([]), "another tenant sees nothing");
    let listed: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(listed["sessions"][0]["id"], "ticket-7");
    let missing = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7",
        "globex",
        "admin-secret",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);

    let stats: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(stats["messages"], chat_history(2, 200).len());
    assert_eq!(stats["log_len"], chat_history(2, 200).len());

    // A tenant token reaches its own tenant, and no other.
    let own: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions",
        "acme",
        "acme-token-1",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(own["sessions"][0]["id"], "ticket-7");
    let crossing = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7",
        "acme",
        "globex-token-1",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(crossing.status(), 403);
    let scoped: Value = client()
        .get(gw.url("/admin/sessions"))
        .header("authorization", "Bearer globex-token-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        scoped["sessions"],
        json!([]),
        "globex's token lists globex only"
    );

    let bad = admin(
        reqwest::Method::PATCH,
        "/admin/sessions/ticket-7/policy",
        "acme",
        "admin-secret",
    )
    .body("trigger_ratio = 0.99")
    .send()
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("trigger_ratio"));
    let good = admin(
        reqwest::Method::PATCH,
        "/admin/sessions/ticket-7/policy",
        "acme",
        "admin-secret",
    )
    .header("content-type", "application/json")
    .body(r#"{"keep_recent_rounds": 5}"#)
    .send()
    .await
    .unwrap();
    assert_eq!(good.status(), 200);
    let policy: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7/policy",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(policy["effective"]["keep_recent_rounds"], 5);

    let hits: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7/search?q=rounding",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
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
    let stats: Value = admin(
        reqwest::Method::GET,
        "/admin/sessions/ticket-7",
        "acme",
        "admin-secret",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(stats["messages"], 0);
    assert_eq!(
        stats["log_len"],
        chat_history(2, 200).len(),
        "the log stays"
    );
    assert_eq!(stats["policy_overrides"], "keep_recent_rounds = 5\n");
}
