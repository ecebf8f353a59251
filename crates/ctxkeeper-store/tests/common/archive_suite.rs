//! The offloader conformance suite: every archive backend runs every check here.

use std::collections::BTreeSet;
use std::sync::Arc;

use ctxkeeper_core::model::Message;
use ctxkeeper_store::StoreError;
use ctxkeeper_store::archive::{ArchiveRef, ArchiveScope, Offloader};

use super::unique;

/// Runs the whole suite against one archive.
pub async fn run_all(name: &str, archive: Arc<dyn Offloader>) {
    byte_exact_tool_results(&*archive).await;
    context_line_ranges(&*archive).await;
    concurrent_context_offloads(Arc::clone(&archive)).await;
    repeated_tool_call_ids(Arc::clone(&archive)).await;
    data_by_hash(&*archive).await;
    grep_glob_list(&*archive).await;
    hostile_ids_and_references(&*archive).await;
    tenant_isolation(&*archive).await;
    seed_layout_files(&*archive).await;
    tool_results_folder(&*archive).await;
    eprintln!("{name}: offloader conformance passed");
}

fn scope(tenant: &str) -> ArchiveScope {
    ArchiveScope {
        tenant: tenant.to_string(),
        session: "s1".to_string(),
    }
}

pub async fn byte_exact_tool_results(archive: &dyn Offloader) {
    let sc = scope(&unique("exact"));
    let content = format!(
        "{}\nlast line without newline: Grüße 東京 🚀",
        "ünïcödé 😀 line\r\n".repeat(5_000)
    );
    let r = archive
        .offload_tool_result(&sc, "call_1", &content)
        .await
        .unwrap();
    assert_eq!(r.as_str(), "sessions/s1/tool_result-call_1.txt");
    assert_eq!(archive.read_all(&sc, &r).await.unwrap(), content.as_bytes());
    for limit in [1u64, 3, 7, 4096] {
        let mut offset = 0;
        let mut out = String::new();
        let mut pages = 0;
        loop {
            let page = archive.read(&sc, &r, offset, limit).await.unwrap();
            assert_eq!(page.total_bytes, content.len() as u64);
            assert_eq!(page.offset, offset);
            out.push_str(&page.content);
            pages += 1;
            match page.next_offset {
                Some(next) => {
                    assert!(next > offset);
                    offset = next;
                }
                None => break,
            }
            if limit < 4096 && pages > 50 {
                // Small pages are checked on a prefix only, to keep the suite fast.
                out.push_str(&String::from_utf8_lossy(
                    &content.as_bytes()[offset as usize..],
                ));
                break;
            }
        }
        assert_eq!(out, content, "limit {limit}");
    }
    // An empty result is archived too.
    let empty = archive
        .offload_tool_result(&sc, "call_empty", "")
        .await
        .unwrap();
    assert_eq!(archive.read_all(&sc, &empty).await.unwrap(), b"");
    let page = archive.read(&sc, &empty, 0, 10).await.unwrap();
    assert_eq!((page.content.as_str(), page.next_offset), ("", None));
    assert!(matches!(
        archive.read(&sc, &r, content.len() as u64 + 1, 10).await,
        Err(StoreError::InvalidInput(_))
    ));
}

pub async fn context_line_ranges(archive: &dyn Offloader) {
    let sc = scope(&unique("ctx"));
    let first = vec![Message::user("one"), Message::assistant("two ✓")];
    let second = vec![
        Message::user("three"),
        Message::tool_result("c", "four\nwith newline"),
        Message::assistant("five"),
    ];
    let r1 = archive.offload_context(&sc, &first).await.unwrap();
    let r2 = archive.offload_context(&sc, &second).await.unwrap();
    assert_eq!(r1.as_str(), "sessions/s1/context.jsonl#L1-L2");
    assert_eq!(r2.as_str(), "sessions/s1/context.jsonl#L3-L5");
    let parse = |bytes: Vec<u8>| -> Vec<Message> {
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.ends_with('\n'));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    assert_eq!(parse(archive.read_all(&sc, &r1).await.unwrap()), first);
    assert_eq!(parse(archive.read_all(&sc, &r2).await.unwrap()), second);
    let whole = ArchiveRef("sessions/s1/context.jsonl".into());
    let all = parse(archive.read_all(&sc, &whole).await.unwrap());
    assert_eq!(all.len(), 5);
    assert_eq!(all[4], Message::assistant("five"));
    let page = archive.read(&sc, &r2, 0, 1 << 20).await.unwrap();
    assert_eq!(page.content.lines().count(), 3);
    let inner = ArchiveRef("sessions/s1/context.jsonl#L2-L4".into());
    assert_eq!(parse(archive.read_all(&sc, &inner).await.unwrap()).len(), 3);
    let past = ArchiveRef("sessions/s1/context.jsonl#L5-L9".into());
    assert!(matches!(
        archive.read_all(&sc, &past).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        archive.offload_context(&sc, &[]).await,
        Err(StoreError::InvalidInput(_))
    ));
}

pub async fn concurrent_context_offloads(archive: Arc<dyn Offloader>) {
    let sc = scope(&unique("ctx-conc"));
    let mut handles = Vec::new();
    for t in 0..6 {
        let archive = Arc::clone(&archive);
        let sc = sc.clone();
        handles.push(tokio::spawn(async move {
            let mut refs = Vec::new();
            for r in 0..5 {
                let msgs = vec![
                    Message::user(format!("{t}-{r}-a")),
                    Message::user(format!("{t}-{r}-b")),
                ];
                refs.push((archive.offload_context(&sc, &msgs).await.unwrap(), msgs));
            }
            refs
        }));
    }
    let mut lines = BTreeSet::new();
    for handle in handles {
        for (r, msgs) in handle.await.unwrap() {
            let (a, b) = parse_range(r.as_str());
            assert_eq!(b - a + 1, 2);
            assert!(lines.insert(a) && lines.insert(b), "ranges overlap: {r}");
            let text = String::from_utf8(archive.read_all(&sc, &r).await.unwrap()).unwrap();
            let got: Vec<Message> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(got, msgs);
        }
    }
    assert_eq!(lines, (1..=60).collect::<BTreeSet<u64>>());
}

/// The references of every item in `scope`.
async fn listed(archive: &dyn Offloader, scope: &ArchiveScope) -> Vec<String> {
    archive
        .list(scope)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.reference.0)
        .collect()
}

fn parse_range(reference: &str) -> (u64, u64) {
    let (_, fragment) = reference.split_once("#L").unwrap();
    let (a, b) = fragment.split_once("-L").unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

pub async fn repeated_tool_call_ids(archive: Arc<dyn Offloader>) {
    let sc = scope(&unique("repeat"));
    let mut refs = Vec::new();
    for i in 0..3 {
        refs.push(
            archive
                .offload_tool_result(&sc, "call_0", &format!("output {i}"))
                .await
                .unwrap(),
        );
    }
    let names: Vec<&str> = refs.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "sessions/s1/tool_result-call_0.txt",
            "sessions/s1/tool_result-call_0(1).txt",
            "sessions/s1/tool_result-call_0(2).txt"
        ]
    );
    for (i, r) in refs.iter().enumerate() {
        assert_eq!(
            archive.read_all(&sc, r).await.unwrap(),
            format!("output {i}").as_bytes()
        );
    }
    // Concurrent writers with the same id never share a reference.
    let mut handles = Vec::new();
    for i in 0..8 {
        let archive = Arc::clone(&archive);
        let sc = sc.clone();
        handles.push(tokio::spawn(async move {
            let content = format!("parallel {i}");
            (
                archive
                    .offload_tool_result(&sc, "call_dup", &content)
                    .await
                    .unwrap(),
                content,
            )
        }));
    }
    let mut seen = BTreeSet::new();
    for handle in handles {
        let (r, content) = handle.await.unwrap();
        assert!(seen.insert(r.clone()), "duplicate reference {r}");
        assert_eq!(archive.read_all(&sc, &r).await.unwrap(), content.as_bytes());
    }
}

pub async fn data_by_hash(archive: &dyn Offloader) {
    let sc = scope(&unique("data"));
    let png: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let r1 = archive.put_data(&sc, &png, "image/png").await.unwrap();
    let r2 = archive.put_data(&sc, &png, "image/png").await.unwrap();
    assert_eq!(r1, r2);
    assert!(r1.as_str().starts_with("data/") && r1.as_str().ends_with(".png"));
    assert_eq!(r1.as_str().len(), "data/".len() + 64 + ".png".len());
    assert_eq!(archive.read_all(&sc, &r1).await.unwrap(), png);
    let other = archive
        .put_data(&sc, b"RIFF....WAVE", "audio/wav")
        .await
        .unwrap();
    assert!(other.as_str().ends_with(".wav") && other != r1);
    // Binary data reads as (lossy) text pages without failing.
    let page = archive.read(&sc, &r1, 0, 100).await.unwrap();
    assert_eq!(page.total_bytes, 70_000);
}

pub async fn grep_glob_list(archive: &dyn Offloader) {
    let sc = scope(&unique("grep"));
    archive
        .offload_tool_result(
            &sc,
            "call_a",
            "alpha\nERROR: disk full\ngamma\nERROR: retry failed\n",
        )
        .await
        .unwrap();
    archive
        .offload_tool_result(&sc, "call_b", "nothing to see")
        .await
        .unwrap();
    archive
        .offload_context(
            &sc,
            &[
                Message::user("first"),
                Message::assistant("an ERROR happened"),
            ],
        )
        .await
        .unwrap();
    let pattern = regex::Regex::new("ERROR").unwrap();
    let hits = archive.grep(&sc, &pattern, 10).await.unwrap();
    let found: Vec<(String, u64)> = hits
        .iter()
        .map(|h| (h.reference.to_string(), h.line))
        .collect();
    assert!(
        found.contains(&("sessions/s1/tool_result-call_a.txt".into(), 2)),
        "{found:?}"
    );
    assert!(
        found.contains(&("sessions/s1/tool_result-call_a.txt".into(), 4)),
        "{found:?}"
    );
    assert!(
        found.contains(&("sessions/s1/context.jsonl".into(), 2)),
        "{found:?}"
    );
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h.text.contains("ERROR")));
    assert_eq!(archive.grep(&sc, &pattern, 2).await.unwrap().len(), 2);

    let list = archive.list(&sc).await.unwrap();
    let names: Vec<&str> = list.iter().map(|e| e.reference.as_str()).collect();
    assert_eq!(
        names,
        [
            "sessions/s1/context.jsonl",
            "sessions/s1/tool_result-call_a.txt",
            "sessions/s1/tool_result-call_b.txt"
        ]
    );
    assert_eq!(list[2].bytes, "nothing to see".len() as u64);
    assert!(list[0].bytes > 0);
    let tools = archive.glob(&sc, "tool_result-*").await.unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(archive.glob(&sc, "*.jsonl").await.unwrap().len(), 1);
    assert_eq!(
        archive
            .glob(&sc, "sessions/s1/*_b.txt")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(matches!(
        archive.glob(&sc, "[").await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(
        archive
            .list(&scope(&unique("empty")))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn hostile_ids_and_references(archive: &dyn Offloader) {
    let tenant = unique("hostile");
    let sc = scope(&tenant);
    let r = archive
        .offload_tool_result(&sc, "../../etc/passwd", "not a password")
        .await
        .unwrap();
    assert!(r.as_str().starts_with("sessions/s1/tool_result-"), "{r}");
    assert!(
        !r.as_str()[12..].contains('/') && r.as_str().split('/').all(|s| s != ".."),
        "{r}"
    );
    assert_eq!(archive.read_all(&sc, &r).await.unwrap(), b"not a password");
    let evil = ArchiveScope {
        tenant: tenant.clone(),
        session: "../../x".into(),
    };
    let r2 = archive
        .offload_tool_result(&evil, "id", "inside")
        .await
        .unwrap();
    assert!(
        r2.as_str()
            .split('/')
            .all(|s| s != ".." && !s.starts_with('.')),
        "{r2}"
    );
    assert_eq!(archive.read_all(&evil, &r2).await.unwrap(), b"inside");
    for hostile in [
        "../../etc/passwd",
        "/etc/passwd",
        "sessions/s1/../../../etc/passwd",
        "sessions\\s1\\tool_result-call.txt",
        "sessions/s1/.context.lock",
        "sessions/s1/tool_result-x.txt#L1-L2",
        "sessions/s1/context.jsonl#L0-L3",
        "sessions/s1/context.jsonl#L1-Lx",
        "sessions/other/tool_result-call_1.txt",
        "tenants/other/sessions/s1/tool_result-call_1.txt",
        "data/../../x",
        "data/x/y",
        "",
        "sessions/s1/",
        "sessions/s1/tool_result-missing.txt",
        "data/0000.png",
    ] {
        let reference = ArchiveRef(hostile.to_string());
        let read = archive.read_all(&sc, &reference).await;
        assert!(
            matches!(
                read,
                Err(StoreError::InvalidInput(_)) | Err(StoreError::NotFound(_))
            ),
            "{hostile:?}: {read:?}"
        );
        let page = archive.read(&sc, &reference, 0, 10).await;
        assert!(
            matches!(
                page,
                Err(StoreError::InvalidInput(_)) | Err(StoreError::NotFound(_))
            ),
            "{hostile:?}"
        );
    }
    assert!(
        archive
            .offload_tool_result(
                &ArchiveScope {
                    tenant: String::new(),
                    session: "s".into()
                },
                "x",
                "y"
            )
            .await
            .is_err()
    );
}

pub async fn tenant_isolation(archive: &dyn Offloader) {
    let (a, b) = (scope(&unique("iso-a")), scope(&unique("iso-b")));
    let r = archive
        .offload_tool_result(&a, "call_1", "tenant a only")
        .await
        .unwrap();
    let d = archive
        .put_data(&a, b"secret bytes", "image/png")
        .await
        .unwrap();
    assert!(matches!(
        archive.read_all(&b, &r).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        archive.read_all(&b, &d).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(archive.list(&b).await.unwrap().is_empty());
    assert!(
        archive
            .grep(&b, &regex::Regex::new("tenant").unwrap(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // The same id in tenant B is a fresh name, not a clash suffix.
    let rb = archive
        .offload_tool_result(&b, "call_1", "tenant b")
        .await
        .unwrap();
    assert_eq!(rb, r);
    assert_eq!(archive.read_all(&a, &r).await.unwrap(), b"tenant a only");
    // The default tenant is isolated from named ones too.
    let default = ArchiveScope::session("s1");
    let _ = archive
        .offload_tool_result(&default, &unique("call"), "default")
        .await
        .unwrap();
}

/// The seed layouts' whole-file items (ReMe's group files, Agentrail's compaction archive)
/// and AgentScope's data files for the images of archived messages.
pub async fn seed_layout_files(archive: &dyn Offloader) {
    use base64::Engine as _;
    use ctxkeeper_core::model::{DataSource, Part};
    let sc = scope(&unique("seedfiles"));
    let png: Vec<u8> = (0..=255u8).cycle().take(3_000).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
    let image = Part::Data {
        source: DataSource::Url {
            url: format!("data:image/png;base64,{encoded}"),
        },
        wire_type: Some("image_url".into()),
        extra: Default::default(),
    };
    let with_image = Message::new(
        ctxkeeper_core::model::Role::User,
        vec![Part::text("look at this"), image],
    );
    let group = vec![with_image.clone(), Message::assistant("a chart")];

    // A group file: a JSON array of the messages, the image stored once under data/.
    let r = archive
        .offload_messages_file(&sc, "chat-1_1.json", &group)
        .await
        .unwrap();
    assert_eq!(r.as_str(), "sessions/s1/chat-1_1.json");
    let stored: Vec<Message> =
        serde_json::from_slice(&archive.read_all(&sc, &r).await.unwrap()).unwrap();
    assert_eq!(stored.len(), 2);
    let Part::Data {
        source: DataSource::Archived { sha256, media_type },
        ..
    } = &stored[0].parts[1]
    else {
        panic!("the image is named by reference: {:?}", stored[0].parts);
    };
    assert_eq!(media_type, "image/png");
    let data = ArchiveRef(format!("data/{sha256}.png"));
    assert_eq!(archive.read_all(&sc, &data).await.unwrap(), png);
    // An existing file is never overwritten.
    assert!(matches!(
        archive
            .offload_messages_file(&sc, "chat-1_1.json", &group)
            .await,
        Err(StoreError::Conflict { .. })
    ));

    // The compaction archive: one message per line, in its sub-directory.
    let c = archive
        .offload_messages_file(&sc, "messages.compactions/abc.jsonl", &group)
        .await
        .unwrap();
    assert_eq!(c.as_str(), "sessions/s1/messages.compactions/abc.jsonl");
    let text = String::from_utf8(archive.read_all(&sc, &c).await.unwrap()).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(!text.contains(&encoded[..64]), "no inline image left");
    let listed = listed(archive, &sc).await;
    assert!(listed.contains(&c.0) && listed.contains(&r.0), "{listed:?}");
    let hits = archive
        .grep(&sc, &regex::Regex::new("a chart").unwrap(), 10)
        .await
        .unwrap();
    assert!(hits.iter().any(|h| h.reference == c), "{hits:?}");

    // The context archive stores images the same way.
    let line = archive.offload_context(&sc, &[with_image]).await.unwrap();
    let text = String::from_utf8(archive.read_all(&sc, &line).await.unwrap()).unwrap();
    assert!(text.contains(sha256.as_str()) && !text.contains(&encoded[..64]));

    // Names outside the layouts are refused before anything is written.
    for bad in [
        "../x.json",
        "a/b.json",
        "messages.compactions/../x",
        ".hidden.json",
        "context.jsonl",
        "",
    ] {
        assert!(
            matches!(
                archive.offload_messages_file(&sc, bad, &group).await,
                Err(StoreError::InvalidInput(_))
            ),
            "{bad:?} was accepted"
        );
    }
}

/// Agentrail's `tool-results/<toolCallId>.txt`: each whole output in the session's folder,
/// a repeated id numbered, a hostile id one sanitized file name inside that folder, and every
/// file listed, grepped and read back like any item.
pub async fn tool_results_folder(archive: &dyn Offloader) {
    let sc = scope(&unique("toolresults"));
    let first = archive
        .offload_tool_result_file(&sc, "call_7", "first output")
        .await
        .unwrap();
    assert_eq!(first.as_str(), "sessions/s1/tool-results/call_7.txt");
    let again = archive
        .offload_tool_result_file(&sc, "call_7", "second output")
        .await
        .unwrap();
    assert_eq!(again.as_str(), "sessions/s1/tool-results/call_7(1).txt");
    assert_eq!(
        archive.read_all(&sc, &first).await.unwrap(),
        b"first output"
    );
    assert_eq!(
        archive.read_all(&sc, &again).await.unwrap(),
        b"second output"
    );
    let long = "y".repeat(500);
    for hostile in ["../../x", "/etc/passwd", "a\0b", "..", long.as_str()] {
        let r = archive
            .offload_tool_result_file(&sc, hostile, "hostile output")
            .await
            .unwrap();
        let name = r
            .as_str()
            .strip_prefix("sessions/s1/tool-results/")
            .unwrap_or_else(|| panic!("{hostile:?} left the folder: {r}"));
        assert!(
            !name.contains('/') && !name.starts_with('.') && name.len() < 200,
            "{hostile:?} became {name:?}"
        );
        assert_eq!(archive.read_all(&sc, &r).await.unwrap(), b"hostile output");
    }
    let listed = listed(archive, &sc).await;
    assert_eq!(listed.len(), 7, "{listed:?}");
    assert!(
        listed.contains(&first.0) && listed.contains(&again.0),
        "{listed:?}"
    );
    let hits = archive
        .grep(&sc, &regex::Regex::new("second").unwrap(), 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].reference, again);
    let globbed = archive.glob(&sc, "call_7*").await.unwrap();
    assert_eq!(globbed.len(), 2, "{globbed:?}");
}
