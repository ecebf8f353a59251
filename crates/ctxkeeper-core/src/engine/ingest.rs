//! Ingest: a message entering the context is pinned or not, and a tool result over its cap
//! is cut to a preview (head, or head + tail, or its ranked lines) with the whole output
//! listed for archiving, before it ever counts against the window.

use super::*;

impl Engine {
    /// Decides how a message enters the context: as it is, or with oversized tool results cut
    /// to a head + tail preview whose whole output must be archived first.
    pub fn plan_ingest(&self, state: &ContextState, budget: &Budget, message: Message) -> Ingest {
        let Some(cap) = &self.config.ingest.tool_result else {
            return Ingest::Ready(message);
        };
        if cap.historical_only || !message.has_tool_results() {
            return Ingest::Ready(message);
        }
        self.cap_results(state, cap, ingest_room(state, budget), message)
    }

    /// Cuts the tool results of `message` (the newest round's, removed from `state` by the
    /// caller) to previews of at most `limit` tokens each, their whole text to be archived: a
    /// recovery's last resort when the round alone does not fit beside what every request
    /// carries. The preview is shaped as the policy's ingest cap shapes it (every tool
    /// included); `Ready` when nothing is over the limit.
    pub fn plan_result_cut(&self, state: &ContextState, message: Message, limit: u64) -> Ingest {
        let configured = self.config.ingest.tool_result.clone().unwrap_or_default();
        let cap = ToolResultCap {
            max_tokens: Some(limit.max(1)),
            max_chars: None,
            max_window_share: None,
            exclude_tools: Vec::new(),
            historical_only: false,
            ..configured
        };
        self.cap_results(state, &cap, limit, message)
    }

    pub(super) fn cap_results(
        &self,
        state: &ContextState,
        cap: &ToolResultCap,
        room: u64,
        message: Message,
    ) -> Ingest {
        let mut message = message;
        let mut archive = Vec::new();
        // The message's tokens before its first cut: nothing is copied unless one is cut.
        let mut tokens_before = None;
        for index in 0..message.parts.len() {
            let Some((call_id, content)) = message.parts[index].as_tool_result() else {
                continue;
            };
            // The tool's name matters only to a cap that excludes tools (finding it scans
            // the context back to the call and copies the name).
            if !cap.exclude_tools.is_empty()
                && tool_name_for(state, call_id).is_some_and(|t| cap.exclude_tools.contains(&t))
            {
                continue;
            }
            let full = join_text(content);
            if !self.exceeds_cap(cap, &full, room) {
                continue;
            }
            let marker = ref_marker(archive.len());
            let limit = self.token_limit(cap, room);
            let (head, tail) = preview_chars(cap, limit, || self.chars_per_token(&full));
            let preview = match limit {
                Some(limit) if cap.fit_prefix => self.prefix_preview(&full, limit, &marker),
                _ if cap.ranked_middle => stages::ranked_preview(&full, head, tail, &marker),
                _ => stages::head_tail_preview(&full, head, tail, &marker),
            };
            archive.push(ArchiveItem::ToolResult {
                call_id: call_id.to_string(),
                content: full.into_owned(),
            });
            if tokens_before.is_none() {
                tokens_before = Some(u64::from(self.model.message_tokens(&message)));
            }
            if let Part::ToolResult { content, .. } = &mut message.parts[index] {
                *content = vec![Part::text(preview)];
            }
        }
        let Some(tokens_before) = tokens_before else {
            return Ingest::Ready(message);
        };
        let tokens_after = u64::from(self.model.message_tokens(&message));
        Ingest::Cap(IngestPlan {
            archive,
            tokens_before,
            tokens_after,
            message,
        })
    }

    /// Pushes a capped message with its archive references filled in.
    pub fn apply_ingest(
        &self,
        state: &mut ContextState,
        plan: IngestPlan,
        refs: &[String],
    ) -> Vec<Event> {
        let IngestPlan {
            archive,
            tokens_before,
            tokens_after,
            mut message,
        } = plan;
        let refs: Vec<String> = (0..archive.len())
            .map(|i| {
                refs.get(i)
                    .cloned()
                    .unwrap_or_else(|| NOT_ARCHIVED.to_string())
            })
            .collect();
        fill_references(&mut message, &refs, &[]);
        state.push(message);
        if let Some(entry) = state.entries.last_mut() {
            entry.meta.archived = refs.clone();
            for (item, reference) in archive.iter().zip(&refs) {
                if let ArchiveItem::ToolResult { call_id, .. } = item {
                    entry
                        .meta
                        .result_refs
                        .push((call_id.clone(), reference.clone()));
                }
            }
        }
        archive
            .iter()
            .zip(&refs)
            .map(|(item, reference)| Event::ToolResultTruncated {
                call_id: match item {
                    ArchiveItem::ToolResult { call_id, .. } => call_id.clone(),
                    _ => String::new(),
                },
                tokens_before,
                tokens_after,
                reference: reference.clone(),
            })
            .collect()
    }

    /// The cap's limit in tokens: `max_tokens`, or the window share when smaller.
    pub(super) fn token_limit(&self, cap: &ToolResultCap, window: u64) -> Option<u64> {
        let share = cap.max_window_share.map(|s| (s * window as f64) as u64);
        match (cap.max_tokens, share) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The longest prefix of `text` that fits `limit` tokens with the note naming where the
    /// whole output is (AgentScope's tool-result truncation, counted in tokens).
    pub(super) fn prefix_preview(&self, text: &str, limit: u64, reference: &str) -> String {
        let total = self.model.text_tokens(text);
        let note = |kept: usize| {
            format!(
                "\n\n[… truncated: {total} tokens in all, {} characters omitted; the whole output is archived at {reference} (read it with your file tools) …]",
                text[kept..].chars().count()
            )
        };
        // The reference is filled in later: room for a long path.
        let room = limit.saturating_sub(u64::from(self.model.text_tokens(&note(0))) + 64);
        let room = u32::try_from(room).unwrap_or(u32::MAX);
        // Binary search on byte offsets (snapped to characters); each count stops at `room`.
        let (mut fits, mut over) = (0usize, text.len());
        while over - fits > 1 {
            let mut middle = fits + (over - fits) / 2;
            while !text.is_char_boundary(middle) {
                middle -= 1;
            }
            if middle <= fits {
                break;
            }
            if self
                .model
                .text_tokens_up_to(&text[..middle], room)
                .is_some()
            {
                fits = middle;
            } else {
                over = middle;
            }
        }
        format!("{}{}", &text[..fits], note(fits))
    }

    /// Characters per token of `text`, measured on its first 8 KiB (dense output such as
    /// numbers one per line runs under two; prose near four).
    pub(super) fn chars_per_token(&self, text: &str) -> f64 {
        let mut end = text.len().min(8 * 1024);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let sample = &text[..end];
        let tokens = self.model.text_tokens(sample).max(1);
        sample.chars().count() as f64 / f64::from(tokens)
    }

    pub(super) fn exceeds_cap(&self, cap: &ToolResultCap, text: &str, window: u64) -> bool {
        if cap.max_chars.is_some_and(|max| text.chars().count() > max) {
            return true;
        }
        let Some(limit) = self.token_limit(cap, window) else {
            return false;
        };
        // A token is at least one byte, so short texts need no counting; long ones are
        // counted only up to the limit.
        if text.len() as u64 <= limit {
            return false;
        }
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        self.model.text_tokens_up_to(text, limit).is_none()
    }
}

/// What a window share of the ingest cap is a share of: the window, or, when what every
/// request carries anyway (tool schemas, the leading instructions) takes more than half of
/// it, the room left beside that (never under a twentieth of the window). A share of the whole
/// window would let one tool output fill a request the fixed prompt already nearly fills,
/// and no compaction could then make it fit: the output stays whole in the archive, its
/// preview in the context.
pub(super) fn ingest_room(state: &ContextState, budget: &Budget) -> u64 {
    let carried = budget.fixed_tokens + state.leading_system_tokens();
    let room = budget.window.saturating_sub(carried);
    if room >= budget.window / 2 {
        budget.window
    } else {
        room.max(budget.window / 20)
    }
}

/// The head and tail characters of a capped result's preview: the configured ones, shrunk in
/// proportion when they would exceed the cap's token limit at the output's own density
/// (`chars_per_token`, asked only then), so the preview itself fits where the output did not.
pub(super) fn preview_chars(
    cap: &ToolResultCap,
    limit: Option<u64>,
    chars_per_token: impl FnOnce() -> f64,
) -> (usize, usize) {
    let (head, tail) = (cap.head_chars, cap.tail_chars);
    let wanted = head + tail;
    // Three characters a token at most: a preview within it never needs measuring.
    let Some(limit) = limit.filter(|limit| wanted > 0 && (wanted as u64) > limit * 3) else {
        return (head, tail);
    };
    // A tenth spare for the marker and the estimate's error.
    let most = (limit as f64 * chars_per_token() * 0.9) as usize;
    if wanted <= most {
        return (head, tail);
    }
    (head * most / wanted, tail * most / wanted)
}
