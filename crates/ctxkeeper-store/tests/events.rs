//! The session event bus: in-process, and across connections on the real Redis and
//! PostgreSQL — one publisher handle and two subscriber handles, each on its own connection,
//! as three gateway replicas would be. Subscriptions must be released when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ctxkeeper_store::events::{
    Delivery, EventBus, EventSubscription, SUBSCRIBER_BUFFER, SessionEvent, open_event_bus,
};
use ctxkeeper_store::{SessionKey, StoreError};
use serde_json::json;

/// The next delivery; a test failure when nothing arrives within 10 s.
async fn next(subscription: &mut EventSubscription) -> Option<Delivery> {
    tokio::time::timeout(Duration::from_secs(10), subscription.recv())
        .await
        .unwrap_or_else(|_| panic!("no delivery for {:?} within 10 s", subscription.key()))
}

/// Nothing arrives within a short wait.
async fn quiet(subscription: &mut EventSubscription) {
    let got = tokio::time::timeout(Duration::from_millis(300), subscription.recv()).await;
    assert!(got.is_err(), "unexpected delivery: {got:?}");
}

fn event(name: &str, i: u64) -> SessionEvent {
    SessionEvent::new(name, json!({"i": i, "text": "compacted 12 messages"})).unwrap()
}

fn key(tenant: &str) -> SessionKey {
    SessionKey::new(tenant, "default", "default", common::unique("ev")).unwrap()
}

/// Subscribes to `count` distinct sessions and drops each subscription: nothing remains.
fn subscribe_and_leave(bus: &dyn EventBus, count: usize) {
    let before = bus.subscribed_sessions();
    for _ in 0..count {
        let subscription = bus.subscribe(&key("churn"));
        assert_eq!(bus.subscribed_sessions(), before + 1);
        drop(subscription);
    }
    assert_eq!(bus.subscribed_sessions(), before, "subscriptions leaked");
}

/// What every bus does, whether events cross processes or not: `publisher`, `a` and `b`
/// are handles of the same bus for an in-process bus, separate connections otherwise.
async fn suite(publisher: Arc<dyn EventBus>, a: Arc<dyn EventBus>, b: Arc<dyn EventBus>) {
    let watched = key("acme");
    let other = key("acme");
    let mut on_a = a.subscribe(&watched);
    let mut on_b = b.subscribe(&watched);
    let mut second_on_b = b.subscribe(&watched);
    let mut other_on_b = b.subscribe(&other);
    assert_eq!(b.subscribed_sessions(), 2);

    for i in 0..3 {
        publisher
            .publish(&watched, &event("step", i))
            .await
            .unwrap();
    }
    for subscription in [&mut on_a, &mut on_b, &mut second_on_b] {
        for i in 0..3 {
            assert_eq!(
                next(subscription).await,
                Some(Delivery::Event(event("step", i))),
                "in publish order, once each"
            );
        }
    }
    // Another session's subscriber saw none of it: its first delivery is its own event.
    publisher.publish(&other, &event("other", 9)).await.unwrap();
    assert_eq!(
        next(&mut other_on_b).await,
        Some(Delivery::Event(event("other", 9)))
    );
    quiet(&mut on_a).await;

    // Bad events are refused before they are sent.
    for bad in [
        SessionEvent {
            name: "x\nevent: forged".into(),
            data: json!(null),
        },
        SessionEvent {
            name: "big".into(),
            data: json!("x".repeat(8_000)),
        },
    ] {
        assert!(matches!(
            publisher.publish(&watched, &bad).await,
            Err(StoreError::InvalidInput(_))
        ));
    }

    // Released when dropped: the last subscriber of a session frees it.
    drop(on_b);
    assert_eq!(b.subscribed_sessions(), 2);
    drop(second_on_b);
    drop(other_on_b);
    drop(on_a);
    assert_eq!(b.subscribed_sessions(), 0);
    assert_eq!(a.subscribed_sessions(), 0);
    subscribe_and_leave(b.as_ref(), 25_000);

    // Closing ends the streams, and later subscriptions end at once.
    let mut open = a.subscribe(&watched);
    a.close();
    assert_eq!(next(&mut open).await, None);
    assert_eq!(next(&mut a.subscribe(&watched)).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_bus_delivers_within_its_handle_and_releases_subscriptions() {
    // The URL only selects the bus: a SQLite store's has nothing to open.
    let bus = open_event_bus("sqlite:///nonexistent/sessions.db")
        .await
        .unwrap();
    assert!(!bus.spans_processes());
    suite(bus.clone(), bus.clone(), bus).await;

    // Two handles opened separately do not share events: that needs Redis or PostgreSQL.
    let one = open_event_bus("memory://").await.unwrap();
    let two = open_event_bus("memory://").await.unwrap();
    let watched = key("acme");
    let mut elsewhere = two.subscribe(&watched);
    one.publish(&watched, &event("step", 1)).await.unwrap();
    quiet(&mut elsewhere).await;
}

#[tokio::test]
async fn a_slow_subscriber_is_told_what_it_lost() {
    let bus = open_event_bus("memory://").await.unwrap();
    let watched = key("acme");
    let mut slow = bus.subscribe(&watched);
    let sent = SUBSCRIBER_BUFFER as u64 + 10;
    for i in 0..sent {
        bus.publish(&watched, &event("step", i)).await.unwrap();
    }
    assert_eq!(
        next(&mut slow).await,
        Some(Delivery::Lost { missed: Some(10) })
    );
    assert_eq!(
        next(&mut slow).await,
        Some(Delivery::Event(event("step", 10)))
    );
}

#[tokio::test]
async fn dropping_the_last_handle_ends_the_streams() {
    let bus = open_event_bus("memory://").await.unwrap();
    let other_handle = bus.clone();
    let mut subscription = bus.subscribe(&key("acme"));
    drop(bus);
    quiet(&mut subscription).await;
    drop(other_handle);
    assert_eq!(next(&mut subscription).await, None);
}

#[tokio::test]
async fn unknown_schemes_are_refused() {
    assert!(matches!(
        open_event_bus("ftp://x").await,
        Err(StoreError::InvalidInput(_))
    ));
}

/// `url` with a key prefix of its own, so parallel runs on one server never meet.
#[cfg(feature = "redis")]
fn with_prefix(url: &str, prefix: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}prefix={prefix}")
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_bus_reaches_every_replica() {
    let Some(url) = common::service_url(common::REDIS_VAR, "redis", common::REDIS_DEFAULT) else {
        return;
    };
    let prefix = common::unique("evtest");
    let url = with_prefix(&url, &prefix);
    let Some(publisher) = common::answered("redis", open_event_bus(&url).await) else {
        return;
    };
    let a = open_event_bus(&url).await.unwrap();
    let b = open_event_bus(&url).await.unwrap();
    assert!(a.spans_processes());
    // One server subscription per handle, however many sessions are watched.
    let numsub = || async {
        let client = redis::Client::open(url.split('?').next().unwrap()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (_, count): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(format!("{prefix}:events"))
            .query_async(&mut conn)
            .await
            .unwrap();
        count
    };
    assert_eq!(numsub().await, 3);
    suite(publisher.clone(), a.clone(), b.clone()).await;
    assert_eq!(
        numsub().await,
        3,
        "subscriptions left server-side state behind"
    );
    // A dropped bus stops listening.
    drop(b);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while numsub().await != 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped bus still listens"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((publisher, a));
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_bus_reaches_every_replica() {
    let Some(url) = common::service_url(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT)
    else {
        return;
    };
    let Some(publisher) = common::answered("postgres", open_event_bus(&url).await) else {
        return;
    };
    let a = open_event_bus(&url).await.unwrap();
    let b = open_event_bus(&url).await.unwrap();
    assert!(a.spans_processes());
    suite(publisher, a, b).await;
}

/// Two processes: the test binary subscribes here and a child process publishes, as two
/// gateway replicas on one database would.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_cross_processes() {
    let url = common::service_url(common::POSTGRES_VAR, "postgres", common::POSTGRES_DEFAULT);
    cross_process("postgres", url).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_events_cross_processes() {
    let url = common::service_url(common::REDIS_VAR, "redis", common::REDIS_DEFAULT)
        .map(|url| with_prefix(&url, &common::unique("evproc")));
    cross_process("redis", url).await;
}

const CHILD_ENV: &str = "CTXKEEPER_EVENTS_CHILD";

/// The publishing child: `URL|TENANT|SESSION`, publishes three events and exits.
#[test]
#[ignore = "entry point of the child process spawned by the cross-process tests"]
fn events_child() {
    let Some(parts) = common::child_args(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let bus = open_event_bus(&parts[0]).await.unwrap();
        let key = SessionKey::new(&parts[1], "default", "default", &parts[2]).unwrap();
        for i in 0..3 {
            bus.publish(&key, &event("from_child", i)).await.unwrap();
        }
    });
}

/// The cross-process test on the server at `url` (`None`: not configured, skipped).
#[allow(dead_code)]
async fn cross_process(backend: &str, url: Option<String>) {
    let Some(url) = url else {
        return;
    };
    let Some(bus) = common::answered(backend, open_event_bus(&url).await) else {
        return;
    };
    let watched = key("acme");
    let mut subscription = bus.subscribe(&watched);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "events_child", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!("{url}|{}|{}", watched.tenant(), watched.session()),
        )
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    for i in 0..3 {
        assert_eq!(
            next(&mut subscription).await,
            Some(Delivery::Event(event("from_child", i)))
        );
    }
}
