//! The image limit (`ingest.max_images`, AgentScope's "max images kept: 5"): when the context
//! holds more data parts (images, audio, documents) than the policy allows, the oldest leave
//! it. The host stores each one's bytes (`data/<sha256>.<ext>`) and the engine puts a line
//! naming that file where the part was, so the agent can read it back with its file tools.
//!
//! Pure like the rest of the engine: [`Engine::plan_images`] lists what must leave,
//! [`Engine::apply_images`] rewrites the entries with the references the host obtained.

use super::{ContextState, Engine, Event};
use crate::model::{DataSource, Part};

/// One data part that must leave the context.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageOffload {
    /// The entry holding it.
    pub entry: usize,
    /// Its position: the part index, and inside a tool result the index within its content.
    pub part: usize,
    pub inner: Option<usize>,
    /// Where its bytes are now; the host stores inline bytes and keeps a remote URL as the
    /// reference (it has no bytes to store).
    pub source: DataSource,
}

/// The line that replaces an offloaded data part.
pub fn image_placeholder(reference: &str) -> String {
    format!(
        "[image removed from the context (at most the newest images are kept); stored at {reference}]"
    )
}

impl Engine {
    /// The data parts over the policy's `ingest.max_images`, oldest first; empty when the
    /// policy sets no limit or the context is within it. Parts of pinned messages stay and
    /// count toward the limit.
    pub fn plan_images(&self, state: &ContextState) -> Vec<ImageOffload> {
        let Some(max) = self.config.ingest.max_images else {
            return Vec::new();
        };
        let mut all: Vec<(bool, ImageOffload)> = Vec::new();
        for (entry_index, entry) in state.entries.iter().enumerate() {
            let pinned = entry.meta.pinned;
            for (part_index, part) in entry.message.parts.iter().enumerate() {
                match part {
                    Part::Data { source, .. } => all.push((
                        pinned,
                        ImageOffload {
                            entry: entry_index,
                            part: part_index,
                            inner: None,
                            source: source.clone(),
                        },
                    )),
                    Part::ToolResult { content, .. } => {
                        for (inner, part) in content.iter().enumerate() {
                            if let Part::Data { source, .. } = part {
                                all.push((
                                    pinned,
                                    ImageOffload {
                                        entry: entry_index,
                                        part: part_index,
                                        inner: Some(inner),
                                        source: source.clone(),
                                    },
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut excess = all.len().saturating_sub(max);
        let mut out = Vec::new();
        for (pinned, image) in all {
            if excess == 0 {
                break;
            }
            if !pinned {
                out.push(image);
                excess -= 1;
            }
        }
        out
    }

    /// Replaces each planned part by a line naming its reference (`refs` in plan order, with
    /// the bytes stored there) and
    /// returns one [`Event::ContentOffloaded`] per part. A plan made for another state (an
    /// entry or part no longer a data part) changes nothing there.
    pub fn apply_images(
        &self,
        state: &mut ContextState,
        plan: &[ImageOffload],
        refs: &[(String, u64)],
    ) -> Vec<Event> {
        let mut events = Vec::new();
        for (image, (reference, bytes)) in plan.iter().zip(refs) {
            let Some(entry) = state.entries.get_mut(image.entry) else {
                continue;
            };
            let slot = match (entry.message.parts.get_mut(image.part), image.inner) {
                (Some(part), None) => Some(part),
                (Some(Part::ToolResult { content, .. }), Some(inner)) => content.get_mut(inner),
                _ => None,
            };
            let Some(slot) = slot.filter(|p| matches!(p, Part::Data { .. })) else {
                continue;
            };
            *slot = Part::text(image_placeholder(reference));
            entry.tokens = None;
            entry.estimated = None;
            if !entry.meta.archived.iter().any(|r| r == reference) {
                entry.meta.archived.push(reference.clone());
            }
            events.push(Event::ContentOffloaded {
                reference: reference.clone(),
                bytes: *bytes,
                kind: "data".to_string(),
            });
        }
        if !events.is_empty() {
            state.invalidate_totals();
        }
        events
    }
}
