//! What a plan hands the host to archive before it applies: whole messages, one tool
//! output, or an image, with the references the context will name them by.

use super::*;

/// Content that must be archived before a plan can be applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArchiveItem {
    /// The whole output of a tool call.
    ToolResult { call_id: String, content: String },
    /// Messages leaving the context.
    Messages { messages: Vec<Message> },
    /// A summarized group's messages, also kept in the seed's group file (ReMe
    /// `<chat_id>_<g>.json`): group `index` (from 1) of `total`. See [`ArchiveLayout`].
    Group {
        messages: Vec<Message>,
        index: usize,
        total: usize,
    },
    /// The messages a request-boundary compaction summarized, also kept in the seed's
    /// compaction file (Agentrail `messages.compactions/<id>.jsonl`).
    Compaction { messages: Vec<Message> },
}

impl ArchiveItem {
    /// The item with the markers of earlier items filled in: messages archived by a stage may
    /// hold placeholders an earlier stage of the same plan wrote. Hosts archive the items of a
    /// plan in order and pass the references obtained so far.
    pub fn with_references(&self, refs: &[String]) -> ArchiveItem {
        let mut item = self.clone();
        if let Some(messages) = item.messages_mut()
            && messages.iter().any(has_marker)
        {
            for message in messages {
                fill_references(message, refs, &[]);
            }
        }
        item
    }

    /// The messages of an item that archives messages.
    pub fn messages(&self) -> Option<&[Message]> {
        match self {
            ArchiveItem::ToolResult { .. } => None,
            ArchiveItem::Messages { messages }
            | ArchiveItem::Group { messages, .. }
            | ArchiveItem::Compaction { messages } => Some(messages),
        }
    }

    fn messages_mut(&mut self) -> Option<&mut Vec<Message>> {
        match self {
            ArchiveItem::ToolResult { .. } => None,
            ArchiveItem::Messages { messages }
            | ArchiveItem::Group { messages, .. }
            | ArchiveItem::Compaction { messages } => Some(messages),
        }
    }

    /// Size of the archived content in bytes (messages as JSON lines).
    pub fn bytes(&self) -> u64 {
        match self {
            ArchiveItem::ToolResult { content, .. } => content.len() as u64,
            ArchiveItem::Messages { messages }
            | ArchiveItem::Group { messages, .. }
            | ArchiveItem::Compaction { messages } => {
                // Serialized into a counter, not a buffer: no allocation per message.
                let mut counter = ByteCounter(0);
                for message in messages {
                    if serde_json::to_writer(&mut counter, message).is_ok() {
                        counter.0 += 1;
                    }
                }
                counter.0
            }
        }
    }
}

/// An `io::Write` that only counts what it is given.
struct ByteCounter(u64);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
