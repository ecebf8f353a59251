//! The text of recently searched sessions' archives, kept in memory for the search page.
//!
//! A grep of the archive reads every item of the session (about 0.1 ms an item on a local
//! workspace: a thousand-request session took ~90 ms a search). Archived items never change
//! once written (a reference names one write), so their text can be kept: a search then lists
//! the session's items, reads only those it has not seen, and matches in memory. Bounded per
//! session ([`MAX_SESSION_BYTES`]: larger archives are grepped by the archive itself) and in
//! total ([`MAX_TOTAL_BYTES`], least recently searched sessions leave first). Lines match as
//! in [`Offloader::grep`](ctxkeeper_store::archive::Offloader::grep): the item's text read
//! lossily as UTF-8, line by line, items in the archive's listing order; the pattern is looked
//! for in an item's whole text first ([`matching_lines`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ctxkeeper_store::StoreError;
use ctxkeeper_store::archive::{ArchiveRef, ArchiveScope, GrepHit, Offloader};
use futures_util::StreamExt;

/// Largest archive of one session kept in memory.
pub const MAX_SESSION_BYTES: u64 = 16 * 1024 * 1024;
/// Largest total kept over every session.
pub const MAX_TOTAL_BYTES: u64 = 64 * 1024 * 1024;
/// Items read at once when filling a session.
const READS_IN_FLIGHT: usize = 16;

#[derive(Default)]
struct SessionText {
    items: HashMap<ArchiveRef, Arc<str>>,
    bytes: u64,
    used: u64,
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct ArchiveText {
    sessions: Mutex<(HashMap<ArchiveScope, SessionText>, u64)>,
}

impl ArchiveText {
    /// Lines of the session's archived items matching `pattern`, at most `limit`.
    pub(crate) async fn grep(
        &self,
        archive: &Arc<dyn Offloader>,
        scope: &ArchiveScope,
        pattern: &regex::Regex,
        limit: usize,
    ) -> Result<Vec<GrepHit>, StoreError> {
        let listed = archive.list(scope).await?;
        let total: u64 = listed.iter().map(|entry| entry.bytes).sum();
        if total > MAX_SESSION_BYTES {
            return archive.grep(scope, pattern, limit).await;
        }
        let missing: Vec<ArchiveRef> = {
            let sessions = self.lock();
            let known = sessions.0.get(scope);
            listed
                .iter()
                .filter(|entry| known.is_none_or(|s| !s.items.contains_key(&entry.reference)))
                .map(|entry| entry.reference.clone())
                .collect()
        };
        let read: Vec<(ArchiveRef, Result<Vec<u8>, StoreError>)> =
            futures_util::stream::iter(missing)
                .map(|reference| async move {
                    let bytes = archive.read_all(scope, &reference).await;
                    (reference, bytes)
                })
                .buffer_unordered(READS_IN_FLIGHT)
                .collect()
                .await;
        let texts: Vec<(ArchiveRef, Arc<str>)> = {
            let mut guard = self.lock();
            let (sessions, clock) = &mut *guard;
            *clock += 1;
            let now = *clock;
            let session = sessions.entry(scope.clone()).or_default();
            session.used = now;
            for (reference, bytes) in read {
                // An item that cannot be read is passed over, as the archive's grep does.
                let Ok(bytes) = bytes else { continue };
                let text: Arc<str> = String::from_utf8_lossy(&bytes).into();
                session.bytes += text.len() as u64;
                session.items.insert(reference, text);
            }
            let texts = listed
                .iter()
                .filter_map(|entry| {
                    let text = session.items.get(&entry.reference)?;
                    Some((entry.reference.clone(), text.clone()))
                })
                .collect();
            evict(sessions, scope);
            texts
        };
        let mut hits = Vec::new();
        for (reference, text) in texts {
            let left = limit.saturating_sub(hits.len());
            if left == 0 {
                break;
            }
            hits.extend(
                matching_lines(&text, pattern)
                    .take(left)
                    .map(|(line, text)| GrepHit {
                        reference: reference.clone(),
                        line,
                        text: text.to_string(),
                    }),
            );
        }
        Ok(hits)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<ArchiveScope, SessionText>, u64)> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The lines of `text` (as [`str::lines`] splits it) that `pattern` matches, numbered from 1.
/// The pattern is looked for in the whole text and each line it lands in is checked on its
/// own, so an item without a match costs one scan rather than a match per line. Equal to
/// matching line by line for a pattern that matches inside one line (no anchors, no line
/// break), as the console's escaped queries do.
fn matching_lines<'t>(
    text: &'t str,
    pattern: &'t regex::Regex,
) -> impl Iterator<Item = (u64, &'t str)> + 't {
    // `from` starts line number `number`.
    let (mut from, mut number) = (0, 1u64);
    std::iter::from_fn(move || {
        while from < text.len() {
            let found = pattern.find_at(text, from)?.start();
            let start = text[from..found].rfind('\n').map_or(from, |i| from + i + 1);
            number += text[from..start].bytes().filter(|&b| b == b'\n').count() as u64;
            let (end, next) = match text[found..].find('\n') {
                Some(i) => (found + i, found + i + 1),
                None => (text.len(), text.len()),
            };
            let mut line = &text[start..end];
            if end < text.len() {
                line = line.strip_suffix('\r').unwrap_or(line);
            }
            let at = number;
            (from, number) = (next, number + 1);
            if pattern.is_match(line) {
                return Some((at, line));
            }
        }
        None
    })
}

/// Drops the least recently searched sessions (never `keep`) until the total fits.
fn evict(sessions: &mut HashMap<ArchiveScope, SessionText>, keep: &ArchiveScope) {
    loop {
        let total: u64 = sessions.values().map(|s| s.bytes).sum();
        if total <= MAX_TOTAL_BYTES {
            return;
        }
        let Some(oldest) = sessions
            .iter()
            .filter(|(scope, _)| *scope != keep)
            .min_by_key(|(_, s)| s.used)
            .map(|(scope, _)| scope.clone())
        else {
            return;
        };
        sessions.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_text_matching_finds_the_lines_a_line_by_line_match_finds() {
        let pattern = regex::RegexBuilder::new(&regex::escape("needle"))
            .case_insensitive(true)
            .build()
            .expect("regex");
        for text in [
            "",
            "needle",
            "alpha\nNEEDLE one\r\nbeta\n\nneedle needle\nneedle",
            "\n\nneedle\n",
            "no match here\nnor here\n",
            "nee\ndle\nneedle\r",
            "ééé\nnéédle needle ü\n",
        ] {
            let expected: Vec<(u64, &str)> = text
                .lines()
                .enumerate()
                .filter(|(_, line)| pattern.is_match(line))
                .map(|(i, line)| (i as u64 + 1, line))
                .collect();
            assert_eq!(
                matching_lines(text, &pattern).collect::<Vec<_>>(),
                expected,
                "{text:?}"
            );
        }
    }

    #[tokio::test]
    async fn matches_like_the_archive_and_reads_each_item_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let archive = ctxkeeper_store::open_archive(dir.path().to_str().expect("utf-8"))
            .await
            .expect("archive");
        let scope = ArchiveScope::session("s1");
        archive
            .offload_tool_result(&scope, "c1", "alpha\nneedle one\nbeta")
            .await
            .expect("write");
        let cache = ArchiveText::default();
        let pattern = regex::Regex::new("needle").expect("regex");
        // The cache's hits, which must be the archive's own.
        let grep_both = || async {
            let hits = cache
                .grep(&archive, &scope, &pattern, 10)
                .await
                .expect("grep");
            assert_eq!(
                hits,
                archive.grep(&scope, &pattern, 10).await.expect("grep")
            );
            hits
        };
        let hits = grep_both().await;
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].line, 2);
        // A new item is read on the next search; the old one comes from memory.
        archive
            .offload_tool_result(&scope, "c2", "needle two")
            .await
            .expect("write");
        let hits = grep_both().await;
        assert_eq!(hits.len(), 2);
        assert_eq!(cache.lock().0[&scope].items.len(), 2);
        // Another session's items are not its.
        let other = ArchiveScope::session("s2");
        assert!(
            cache
                .grep(&archive, &other, &pattern, 10)
                .await
                .expect("grep")
                .is_empty()
        );
    }
}
