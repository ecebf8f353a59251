//! Archiving and memory: what leaves the context is written to the archive before it leaves
//! (a failure leaves the context unchanged), and facts and summaries go to the long-term memory
//! files when the policy keeps them.

use super::*;

impl ContextManager {
    /// Appends facts to today's memory file; a failure is reported, never fatal (the
    /// compacted messages are archived regardless).
    pub(crate) async fn remember(&self, facts: Vec<String>) {
        let Some((memory, scope)) = &self.memory else {
            return;
        };
        let session = Some(self.scope.session.as_str());
        let written = memory.flush_from(scope, session, &facts).await;
        self.emit(vec![memory_flushed(written)]);
    }

    /// Writes a summary that goes to memory (`placement = "memory"`, CowAgent's trimmed
    /// turns) to today's daily file with its sections and lines as Markdown.
    pub(crate) async fn remember_summary(
        &self,
        summary: &ctxkeeper_core::summary::Summary,
        schema: &ctxkeeper_core::summary::SummarySchema,
    ) {
        let Some((memory, scope)) = &self.memory else {
            return;
        };
        let sections: Vec<(String, String)> = schema
            .fields
            .iter()
            .map(|field| (field.title.clone(), summary.get(&field.name).to_string()))
            .collect();
        let session = Some(self.scope.session.as_str());
        let written = memory.record_summary(scope, session, &sections).await;
        self.emit(vec![memory_flushed(written)]);
    }

    /// Archives a plan's items in order, each also where `layout` (the policy's seed layout)
    /// puts it, and returns their references.
    pub(crate) async fn archive(
        &mut self,
        items: &[ArchiveItem],
        layout: &ArchiveLayout,
    ) -> Result<Vec<String>, Error> {
        let mut refs = Vec::with_capacity(items.len());
        // ReMe names a compaction's group files after one chat id, fresh per compaction so
        // that no earlier group file is overwritten.
        let mut chat_id: Option<String> = None;
        for item in items {
            // An item may hold placeholders naming earlier items of the same plan.
            let item = &item.with_references(&refs);
            let reference = match item {
                // Agentrail's `tool-results/<toolCallId>.txt` is the output's one archive
                // file: the preview names it.
                ArchiveItem::ToolResult { call_id, content } if layout.tool_results_dir => {
                    self.offloader
                        .offload_tool_result_file(&self.scope, call_id, content)
                        .await?
                }
                ArchiveItem::ToolResult { call_id, content } => {
                    self.offloader
                        .offload_tool_result(&self.scope, call_id, content)
                        .await?
                }
                ArchiveItem::Messages { messages } => {
                    self.offloader
                        .offload_context(&self.scope, messages)
                        .await?
                }
                // The seed's file beside our own context archive; the summary names the
                // seed's file, as the seed's own summary message does.
                ArchiveItem::Group {
                    messages, index, ..
                } => {
                    self.offloader
                        .offload_context(&self.scope, messages)
                        .await?;
                    let chat_id = chat_id
                        .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
                        .clone();
                    self.offloader
                        .offload_messages_file(
                            &self.scope,
                            &format!("{chat_id}_{index}.json"),
                            messages,
                        )
                        .await?
                }
                ArchiveItem::Compaction { messages } => {
                    self.offloader
                        .offload_context(&self.scope, messages)
                        .await?;
                    let name = format!(
                        "{}/{}.jsonl",
                        ctxkeeper_store::archive::COMPACTIONS_DIR,
                        uuid::Uuid::new_v4()
                    );
                    self.offloader
                        .offload_messages_file(&self.scope, &name, messages)
                        .await?
                }
            };
            self.archived_bytes += item.bytes();
            refs.push(reference.0);
        }
        Ok(refs)
    }
}

/// Whether a message carries a data part (image, audio, document), itself or in a result.
pub(crate) fn message_has_data(message: &Message) -> bool {
    use ctxkeeper_core::model::Part;
    message.parts.iter().any(|part| match part {
        Part::Data { .. } => true,
        Part::ToolResult { content, .. } => content.iter().any(|p| matches!(p, Part::Data { .. })),
        _ => false,
    })
}

/// What names a data part that has no bytes to store: its URL, or its archive file.
pub(crate) fn describe_source(source: &ctxkeeper_core::model::DataSource) -> String {
    use ctxkeeper_core::model::DataSource;
    match source {
        DataSource::Url { url } => url.chars().take(300).collect(),
        // Already in the data files: named by its hash (the extension follows its type).
        DataSource::Archived { sha256, .. } => format!("data/{sha256}"),
        DataSource::Base64 { media_type, .. } => format!("an undecodable {media_type} part"),
    }
}

/// The event of a write to the long-term memory: the file written, or why it failed.
fn memory_flushed(written: Result<Option<String>, StoreError>) -> Event {
    match written {
        Ok(path) => Event::MemoryFlushed { path, error: None },
        Err(err) => Event::MemoryFlushed {
            path: None,
            error: Some(err.to_string()),
        },
    }
}
