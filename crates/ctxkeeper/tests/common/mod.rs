//! What the facade's tests share: a manager that needs no service, and feeding it messages.

#![allow(dead_code)]

use std::sync::Arc;

use ctxkeeper::core::model::Message;
use ctxkeeper::llm::ExtractiveSummarizer;
use ctxkeeper::store::object_archive::ObjectArchive;
use ctxkeeper::{ContextManager, Settings};

/// A manager for `session` that archives in memory and summarizes extractively.
pub fn in_memory(settings: Settings, session: &str) -> ContextManager {
    ContextManager::new(
        settings,
        session,
        Arc::new(ObjectArchive::memory()),
        Arc::new(ExtractiveSummarizer::default()),
    )
}

/// Ingests `messages` in order; a refused message fails the test.
pub async fn ingest_all(context: &mut ContextManager, messages: impl IntoIterator<Item = Message>) {
    for message in messages {
        context.ingest(message).await.expect("ingested");
    }
}

/// SplitMix64: a seeded generator, the same sequence on every platform (a generated history is
/// a pure function of its seed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index into a slice of `len` items.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}
