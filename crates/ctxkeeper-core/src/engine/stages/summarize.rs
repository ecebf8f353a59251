//! The summarizing stages: a range of the context replaced by one summary (or one per group
//! of at most a threshold of tokens, ReMe's compress mode), its originals listed for archiving
//! and the summary call planned.

use super::*;

impl Draft<'_> {
    pub(super) fn summarize(
        &mut self,
        keep_tokens: Option<u64>,
        keep_messages: Option<usize>,
        group_threshold: Option<u64>,
        oldest_rounds: Option<usize>,
    ) -> bool {
        let start = self.conversation_start();
        let protect = self.protected_start(0);
        let len = self.entries.len();
        let mut cut = protect;
        if let Some(keep) = keep_messages {
            cut = cut.min(len.saturating_sub(keep));
        }
        match keep_tokens {
            Some(keep) => {
                let mut acc = 0u64;
                let mut index = len;
                let model = &self.engine.model;
                while index > start && acc < keep {
                    index -= 1;
                    acc += u64::from(self.entries[index].planning_tokens(model));
                }
                cut = cut.min(index);
            }
            None => {
                // Keep as much recent context as fits the target next to the summary.
                let instructions: u64 = {
                    let model = &self.engine.model;
                    self.entries[..start]
                        .iter_mut()
                        .map(|e| u64::from(e.planning_tokens(model)))
                        .sum()
                };
                let reserve = u64::from(self.engine.config.summary.max_summary_tokens)
                    + 64
                    + self.capsule_reserve;
                let available = self
                    .target
                    .saturating_sub(self.fixed_tokens + instructions + reserve);
                let mut acc = 0u64;
                let mut index = len;
                let model = &self.engine.model;
                while index > start {
                    let tokens = u64::from(self.entries[index - 1].planning_tokens(model));
                    if acc + tokens > available {
                        break;
                    }
                    acc += tokens;
                    index -= 1;
                }
                cut = cut.min(index);
            }
        }
        if let Some(rounds) = oldest_rounds {
            let end = api_rounds(&self.entries)
                .into_iter()
                .filter(|r| r.start >= start)
                .nth(rounds.saturating_sub(1))
                .map_or(cut, |r| r.end);
            cut = cut.min(end);
        }
        if let Some(through) = self.summarize_through
            && let Some(last) = self.entries[start..cut]
                .iter()
                .position(|e| e.meta.log_index == Some(through))
        {
            // A summary prepared ahead of the trigger read the messages up to `through`:
            // end there, and what arrived since stays verbatim.
            cut = start + last + 1;
        }
        self.summarize_range(start, cut, group_threshold)
    }

    /// Replaces `entries[start..end]` (snapped to a safe split) by summary message(s), keeping
    /// pinned entries and the current turn's opening message.
    pub(super) fn summarize_range(
        &mut self,
        start: usize,
        end: usize,
        group_threshold: Option<u64>,
    ) -> bool {
        let mut end = end.min(self.entries.len());
        while end > start && !is_safe_split(&self.entries, end) {
            end -= 1;
        }
        if end <= start {
            return false;
        }
        let current_turn = self.current_turn_start();
        let stays = |index: usize, entry: &Entry| entry.meta.pinned || Some(index) == current_turn;
        let anything = self.entries[start..end]
            .iter()
            .enumerate()
            .any(|(offset, e)| !e.meta.summary && !stays(start + offset, e));
        if !anything {
            return false;
        }
        // Moved, not cloned: the compacted span can be most of a large context.
        let mut prefix = std::mem::take(&mut self.entries);
        let tail = prefix.split_off(end);
        let span = prefix.split_off(start);
        let mut kept: Vec<Entry> = Vec::new();
        let mut compacted: Vec<Entry> = Vec::new();
        // What the previous summary stood for carries over to the one that merges it: its
        // archive references and its message count, so the header keeps naming every range.
        let mut earlier_refs: Vec<String> = Vec::new();
        let mut earlier_count = 0u64;
        for (offset, entry) in span.into_iter().enumerate() {
            if entry.meta.summary {
                // The previous summary is merged (its text goes to the summarizer), not
                // archived again.
                earlier_refs.extend(entry.meta.archived);
                earlier_count += entry.meta.summarized;
                continue;
            }
            if stays(start + offset, &entry) {
                kept.push(entry);
            } else {
                compacted.push(entry);
            }
        }
        // The user's latest request when the compaction keeps it: the summary names the goal
        // from it instead of leaving its goal field empty.
        let request_in_context = kept
            .iter()
            .chain(tail.iter())
            .rev()
            .find(|e| {
                e.message.role == Role::User
                    && !e.meta.synthetic
                    && !e.meta.summary
                    && e.message.starts_turn()
            })
            .map(|e| e.message.text())
            // A harness's own compaction prompt or summary is not the user's request.
            .filter(|text| {
                !text.trim().is_empty() && !crate::harness::is_client_compaction_text(text)
            });
        let groups = split_groups(compacted, group_threshold, self.model());
        let placement = self.engine.config.summary.placement;
        let total_groups = groups.len();
        let mut summary_entries: Vec<Entry> = Vec::new();
        let mut previous = self.previous_summary.clone();
        for (group_index, group) in groups.into_iter().enumerate() {
            // A summary is bounded by its budget and is typically far shorter than its input.
            let group_tokens: u32 = group
                .iter()
                .map(|e| e.tokens.or(e.estimated).unwrap_or(0))
                .sum();
            let logs: Vec<u64> = group.iter().filter_map(|e| e.meta.log_index).collect();
            let messages: Vec<Message> = group.into_iter().map(|e| e.message).collect();
            let count = messages.len();
            let layout = &self.engine.config.archive;
            let item = if layout.group_files {
                ArchiveItem::Group {
                    messages: messages.clone(),
                    index: group_index + 1,
                    total: total_groups,
                }
            } else if layout.compaction_files
                // Request-boundary only: Agentrail's in-loop compactions (micro, full, and
                // full after a prompt-too-long error) archive nothing of their own.
                && !matches!(
                    self.reason,
                    CompactionReason::ReactiveMicro
                        | CompactionReason::ReactiveFull
                        | CompactionReason::Overflow
                )
            {
                ArchiveItem::Compaction {
                    messages: messages.clone(),
                }
            } else {
                ArchiveItem::Messages {
                    messages: messages.clone(),
                }
            };
            let marker = self.push_archive(item);
            self.note_archived(&logs, &marker);
            let mut request = self.engine.summary_request(
                messages,
                previous.take(),
                self.reason,
                self.focus.clone(),
            );
            request.request_in_context = request_in_context.clone();
            // The standing orders the user set in these messages: the summary must carry them.
            if let Some(capsule) = &self.capsule {
                request.must_keep = capsule
                    .orders
                    .current()
                    .filter(|o| logs.binary_search(&o.log_index).is_ok())
                    .map(|o| o.text.clone())
                    .collect();
            }
            let summary_index = self.summaries.len();
            self.summaries.push(request);
            self.summary_spans.push(match (logs.first(), logs.last()) {
                (Some(&first), Some(&last)) if logs.len() == count => {
                    Some(super::super::LogSpan { first, last, count })
                }
                _ => None,
            });
            if placement == SummaryPlacement::Memory {
                continue;
            }
            // The first group's summary receives the previous summary's text, so it also
            // stands for what that one did.
            let (stands_for, mut archived) = if group_index == 0 {
                (
                    count as u64 + std::mem::take(&mut earlier_count),
                    std::mem::take(&mut earlier_refs),
                )
            } else {
                (count as u64, Vec::new())
            };
            archived.push(marker.clone());
            let mut text = self
                .engine
                .config
                .summary
                .summary_template
                .replace("{count}", &stands_for.to_string())
                .replace("{reference}", &marker)
                .replace("{summary}", &summary_marker(summary_index));
            if total_groups > 1 {
                text = format!("[Part {}/{}] {text}", group_index + 1, total_groups);
            }
            let mut entry = Entry::new(Message::user(text));
            entry.meta.synthetic = true;
            entry.meta.summary = group_index + 1 == total_groups;
            entry.meta.archived = archived;
            entry.meta.summarized = stands_for;
            entry.meta.pending_fill = true;
            let estimate = self.model().message_tokens(&entry.message)
                + self
                    .engine
                    .config
                    .summary
                    .max_summary_tokens
                    .min(group_tokens / 2);
            entry.tokens = Some(estimate);
            summary_entries.push(entry);
        }
        let mut rebuilt = prefix;
        rebuilt.reserve(summary_entries.len() + kept.len() + tail.len());
        rebuilt.extend(summary_entries);
        rebuilt.extend(kept);
        rebuilt.extend(tail);
        self.entries = rebuilt;
        true
    }
}

/// Splits entries into groups of at most `threshold` tokens at safe split points; a unit
/// that cannot be split (a message, or a call with its results) above the threshold forms its
/// own group, as ReMe makes an oversized message a group of its own. `None` gives one group.
pub(super) fn split_groups(
    entries: Vec<Entry>,
    threshold: Option<u64>,
    model: &TokenModel,
) -> Vec<Vec<Entry>> {
    let Some(threshold) = threshold.filter(|t| *t > 0) else {
        return vec![entries];
    };
    let can_split: Vec<bool> = (0..entries.len())
        .map(|index| is_safe_split(&entries, index))
        .collect();
    // Units: runs of entries between safe split points, with their tokens.
    let mut units: Vec<(Vec<Entry>, u64)> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let tokens = u64::from(
            entry
                .tokens
                .or(entry.estimated)
                .unwrap_or_else(|| model.message_tokens(&entry.message)),
        );
        match units.last_mut() {
            Some((unit, total)) if !can_split[index] => {
                unit.push(entry);
                *total += tokens;
            }
            _ => units.push((vec![entry], tokens)),
        }
    }
    let mut groups: Vec<Vec<Entry>> = Vec::new();
    let mut current: Vec<Entry> = Vec::new();
    let mut current_tokens = 0u64;
    for (unit, tokens) in units {
        let oversized = tokens > threshold;
        if !current.is_empty() && (oversized || current_tokens + tokens > threshold) {
            groups.push(std::mem::take(&mut current));
            current_tokens = 0;
        }
        if oversized {
            groups.push(unit);
            continue;
        }
        current.extend(unit);
        current_tokens += tokens;
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}
