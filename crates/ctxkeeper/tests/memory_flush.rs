//! The pre-compaction memory flush: facts the summarizer extracts land in today's memory
//! file before the prefix is compacted; "no facts" writes nothing.

use std::sync::Arc;

use async_trait::async_trait;
use ctxkeeper::core::engine::{Event, presets};
use ctxkeeper::core::model::Message;
use ctxkeeper::core::summary::{Summary, SummaryRequest};
use ctxkeeper::core::tokens::{Profiles, TokenModel};
use ctxkeeper::llm::{ExtractiveSummarizer, LlmError, Summarizer};
use ctxkeeper::store::LocalWorkspace;
use ctxkeeper::store::memory::{LongTermMemory, MemoryScope};
use ctxkeeper::{ContextManager, Settings};

/// Extractive summaries, and a fixed fact (or none) for the memory flush.
#[derive(Debug)]
struct FactFinder(Option<String>);

#[async_trait]
impl Summarizer for FactFinder {
    async fn summarize(&self, request: &SummaryRequest) -> Result<Summary, LlmError> {
        ExtractiveSummarizer::default().summarize(request).await
    }

    fn name(&self) -> &str {
        "fact-finder"
    }

    async fn extract_facts(&self, _: &[Message], _: u32) -> Result<Option<String>, LlmError> {
        Ok(self.0.clone())
    }
}

async fn compact_with(
    fact: Option<&str>,
) -> (
    Vec<Event>,
    Arc<LongTermMemory>,
    MemoryScope,
    tempfile::TempDir,
) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path().to_path_buf();
    let memory = Arc::new(LongTermMemory::new(dir.join("memory")).expect("memory"));
    let scope = MemoryScope::new("default", "alice").expect("scope");
    let settings = Settings {
        policy: presets::preset("default").expect("preset"),
        model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
        window: 4_000,
        fixed_tokens: 0,
    };
    let archive = Arc::new(LocalWorkspace::new(dir.join("workspace")).expect("workspace"));
    let mut context = ContextManager::new(
        settings,
        "s1",
        archive,
        Arc::new(FactFinder(fact.map(String::from))),
    )
    .with_memory(memory.clone(), scope.clone());
    let mut events = context.subscribe();
    context
        .ingest(Message::user(
            "Deploy the service; the staging port is 8443.",
        ))
        .await
        .expect("ingest");
    for i in 0..12 {
        let id = format!("c{i}");
        context
            .ingest(Message::tool_call(&id, "shell", "{}"))
            .await
            .expect("ingest");
        context
            .ingest(Message::tool_result(&id, "deploy log line ".repeat(120)))
            .await
            .expect("ingest");
    }
    let prepared = context.prepare().await.expect("prepare");
    assert!(prepared.compacted);
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    (seen, memory, scope, scratch)
}

#[tokio::test]
async fn facts_are_flushed_to_memory_before_compaction() {
    let (events, memory, scope, _scratch) = compact_with(Some("The staging port is 8443.")).await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::MemoryFlushed {
            path: Some(_),
            error: None
        }
    )));
    let hits = memory
        .memory_search(&scope, "staging port", 5)
        .await
        .expect("search");
    assert!(!hits.is_empty(), "the flushed fact is searchable");
}

#[tokio::test]
async fn no_facts_write_nothing() {
    let (events, memory, scope, _scratch) = compact_with(None).await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::MemoryFlushed {
            path: None,
            error: None
        }
    )));
    let hits = memory
        .memory_search(&scope, "staging", 5)
        .await
        .expect("search");
    assert!(hits.is_empty());
}
