//! A session's archive: what left its context, searched and read back.

use std::sync::Arc;

use ctxkeeper::store::ArchiveRef;
use ctxkeeper::store::archive::{ArchiveEntry, ArchiveScope, GrepHit, Offloader, excerpt};

use crate::error::EmbedError;

/// The archive of one session (a cheap handle: the session's lock is not held while it
/// reads).
#[derive(Clone)]
pub struct Archive {
    offloader: Arc<dyn Offloader>,
    scope: ArchiveScope,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("session", &self.scope.session)
            .finish_non_exhaustive()
    }
}

impl Archive {
    pub(crate) fn new(offloader: Arc<dyn Offloader>, scope: ArchiveScope) -> Archive {
        Archive { offloader, scope }
    }

    /// Lines of the archived content that contain `query` (case-insensitive; a regular
    /// expression with `regex`), at most `limit`, each cut to 400 characters around the
    /// match.
    pub async fn search(
        &self,
        query: &str,
        regex: bool,
        limit: usize,
    ) -> Result<Vec<GrepHit>, EmbedError> {
        if query.is_empty() {
            return Err(EmbedError::invalid("query is empty"));
        }
        let pattern = if regex {
            query.to_string()
        } else {
            regex::escape(query)
        };
        let pattern = regex::RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| EmbedError::invalid(format!("invalid regular expression: {e}")))?;
        let mut hits = self
            .offloader
            .grep(&self.scope, &pattern, limit.clamp(1, 10_000))
            .await?;
        for hit in &mut hits {
            hit.text = excerpt(&hit.text, &pattern, 400);
        }
        Ok(hits)
    }

    /// The whole text of an archived item (a reference from an event, a placeholder or
    /// `search`), or at most `limit` bytes of it from `offset`.
    pub async fn read(
        &self,
        reference: String,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<String, EmbedError> {
        let reference = ArchiveRef(reference);
        let text = match (offset, limit) {
            (0, None) => self
                .offloader
                .read_all(&self.scope, &reference)
                .await
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            (offset, limit) => self
                .offloader
                .read(
                    &self.scope,
                    &reference,
                    offset,
                    limit.unwrap_or(u64::MAX / 2),
                )
                .await
                .map(|page| page.content),
        };
        Ok(text?)
    }

    /// The archived items.
    pub async fn list(&self) -> Result<Vec<ArchiveEntry>, EmbedError> {
        Ok(self.offloader.list(&self.scope).await?)
    }
}
