//! Request-time context: what the gateway adds to a managed request after its stable prefix.
//!
//! `[gateway] context_providers` (none by default) names what goes in: `date` (today's UTC
//! date), `memory` (the tenant's long-term memory files, readable with the MCP tools
//! `memory_get` / `memory_search`) and `budget` (how much of the window the request uses). The
//! providers run through [`ctxkeeper::Assembly`], placed where the policy says
//! (`provider_placement`), and their message is never stored in the session (the next
//! request carries a fresh one):
//!
//! - [`Placement::AfterHistory`] (the default): one message follows the whole history, so
//!   the system prompt, the tool schemas and every earlier message stay the byte-identical
//!   prefix the provider's prompt cache serves;
//! - [`Placement::BeforeHistory`] (`agentrail`, whose context providers are prepended to the
//!   session history): the date and the memory index go right after the leading
//!   instructions. Nothing there changes within a day (the date is a date, never a time of
//!   day), so the prefix stays cached; the budget, which changes on every request, still
//!   follows the history, as a line at the top would break the cached prefix every call.
//!
//! ```
//! use ctxkeeper::Placement;
//! use ctxkeeper_gateway::assembly::{ContextProvider, RequestContext};
//! use ctxkeeper_core::model::Message;
//!
//! let providers = ContextProvider::parse_list(&["date".into(), "budget".into()]).unwrap();
//! let context = RequestContext {
//!     date: "2026-11-25".into(),
//!     memory_files: None,
//!     budget: Some((42.0, 1_234)),
//! };
//! let history = vec![Message::system("rules"), Message::user("hi")];
//! let assembled = context
//!     .assemble(&providers, Placement::AfterHistory, history.clone())
//!     .expect("added");
//! assert_eq!(&assembled[..2], &history[..], "the history is the unchanged prefix");
//! assert!(assembled[2].text().contains("Today's date: 2026-11-25 (UTC)."));
//! assert!(assembled[2].text().contains("42% of the context window"));
//!
//! let prepended = context
//!     .assemble(&providers, Placement::BeforeHistory, history.clone())
//!     .expect("added");
//! assert_eq!(prepended[0], history[0], "the instructions stay first");
//! assert!(prepended[1].text().contains("Today's date: 2026-11-25 (UTC)."));
//! assert_eq!(prepended[2], history[1]);
//! assert!(prepended[3].text().contains("42% of the context window"));
//! ```

use std::sync::Arc;

use ctxkeeper::Prepared;
use ctxkeeper::{Assembly, Placement};
use ctxkeeper_core::model::{Message, Role};
use ctxkeeper_store::SessionKey;
use ctxkeeper_store::memory::{LongTermMemory, MemoryScope, today};

/// One kind of request-time context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextProvider {
    /// Today's date (UTC).
    Date,
    /// The tenant's long-term memory files and how to read them.
    Memory,
    /// The share of the context window the request uses.
    Budget,
}

impl ContextProvider {
    /// Every provider, by name.
    pub const ALL: [ContextProvider; 3] = [
        ContextProvider::Date,
        ContextProvider::Memory,
        ContextProvider::Budget,
    ];

    /// The provider's configuration name.
    pub fn name(self) -> &'static str {
        match self {
            ContextProvider::Date => "date",
            ContextProvider::Memory => "memory",
            ContextProvider::Budget => "budget",
        }
    }

    /// Whether what it says changes from one request to the next: its line always follows
    /// the history, where it leaves the cached prefix alone.
    pub fn changes_every_request(self) -> bool {
        matches!(self, ContextProvider::Budget)
    }

    /// The provider called `name`.
    pub fn parse(name: &str) -> Result<ContextProvider, String> {
        ContextProvider::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .ok_or_else(|| {
                format!(
                    "unknown context provider {name:?} (available: {})",
                    ContextProvider::ALL.map(ContextProvider::name).join(", ")
                )
            })
    }

    /// A list of names, in the order given (a repeated name counts once).
    pub fn parse_list(names: &[String]) -> Result<Vec<ContextProvider>, String> {
        let mut out: Vec<ContextProvider> = Vec::new();
        for name in names {
            let provider = ContextProvider::parse(name)?;
            if !out.contains(&provider) {
                out.push(provider);
            }
        }
        Ok(out)
    }
}

/// What the providers of one request say, gathered before the (synchronous) assembly.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestContext {
    /// Today, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// The tenant's memory files (`MEMORY.md`, `memory/YYYY-MM-DD.md`), when memory is on.
    pub memory_files: Option<Vec<String>>,
    /// The request's share of the window (percent) and its tokens.
    pub budget: Option<(f64, u64)>,
}

impl RequestContext {
    /// Gathers what `providers` need for a request of `key` that `prepared` describes.
    pub async fn gather(
        providers: &[ContextProvider],
        memory: Option<&Arc<LongTermMemory>>,
        key: &SessionKey,
        prepared: &Prepared,
    ) -> RequestContext {
        let memory_files = match memory {
            Some(memory) if providers.contains(&ContextProvider::Memory) => {
                // A listing that fails (a file replaced by a link) leaves the index out of
                // this request rather than failing the model call.
                match memory.files(&MemoryScope::of(key)).await {
                    Ok(files) => Some(files),
                    Err(err) => {
                        tracing::warn!(session = %key, %err, "memory files not listed");
                        None
                    }
                }
            }
            _ => None,
        };
        RequestContext {
            date: today(),
            memory_files,
            budget: Some((prepared.budget_used_pct, prepared.input_tokens)),
        }
    }

    /// The text `providers` add, one line each, or `None` when they have nothing to say.
    pub fn text(&self, providers: &[ContextProvider]) -> Option<String> {
        let lines: Vec<String> = providers
            .iter()
            .filter_map(|provider| match provider {
                ContextProvider::Date => Some(format!("Today's date: {} (UTC).", self.date)),
                ContextProvider::Memory => {
                    let files = self.memory_files.as_ref().filter(|f| !f.is_empty())?;
                    Some(format!(
                        "Long-term memory: {} (search with memory_search, read with memory_get).",
                        files.join(", ")
                    ))
                }
                ContextProvider::Budget => {
                    let (pct, tokens) = self.budget?;
                    Some(format!(
                        "Context budget: {pct:.0}% of the context window is in use ({tokens} \
                         tokens)."
                    ))
                }
            })
            .collect();
        (!lines.is_empty()).then(|| format!("[context]\n{}", lines.join("\n")))
    }

    /// The history with the providers' messages placed at `placement` (a provider whose
    /// line changes every request always after the history), or the history unchanged
    /// (`Err`) when nothing is added: an empty history, no provider with anything to say,
    /// or only lines for after a history that ends with the assistant (a prefill the model
    /// continues, which a message after it would turn into a finished turn).
    pub fn assemble(
        &self,
        providers: &[ContextProvider],
        placement: Placement,
        history: Vec<Message>,
    ) -> Result<Vec<Message>, Vec<Message>> {
        if history.is_empty() {
            return Err(history);
        }
        let (before, after): (Vec<ContextProvider>, Vec<ContextProvider>) =
            providers.iter().partition(|provider| {
                placement == Placement::BeforeHistory && !provider.changes_every_request()
            });
        let prefill = history.last().is_some_and(|m| m.role == Role::Assistant);
        let before = self.text(&before);
        let after = self.text(&after).filter(|_| !prefill);
        if before.is_none() && after.is_none() {
            return Err(history);
        }
        // No base prompt: the client's own instructions stay where they are, in the history.
        let mut assembly = Assembly::new("");
        for (placement, text) in [
            (Placement::BeforeHistory, before),
            (Placement::AfterHistory, after),
        ] {
            if let Some(text) = text {
                assembly.add_provider(placement, move |_: &[Message]| {
                    vec![Message::user(text.clone())]
                });
            }
        }
        Ok(assembly.assemble(history))
    }
}

/// Adds the configured request-time context to a prepared request, placed at `placement`
/// (the policy's `provider_placement`); true when it did (the client's body can then no
/// longer be forwarded as it is).
pub async fn complete(
    providers: &[ContextProvider],
    placement: Placement,
    memory: Option<&Arc<LongTermMemory>>,
    key: &SessionKey,
    prepared: &mut Prepared,
) -> bool {
    if providers.is_empty() {
        return false;
    }
    let context = RequestContext::gather(providers, memory, key, prepared).await;
    let history = std::mem::take(&mut prepared.messages);
    let (messages, added) = match context.assemble(providers, placement, history) {
        Ok(messages) => (messages, true),
        Err(history) => (history, false),
    };
    prepared.messages = messages;
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> RequestContext {
        RequestContext {
            date: "2026-11-25".into(),
            memory_files: Some(vec!["MEMORY.md".into(), "memory/2026-11-25.md".into()]),
            budget: Some((12.4, 500)),
        }
    }

    #[test]
    fn providers_are_named_and_unknown_names_listed() {
        let list = ContextProvider::parse_list(&["memory".into(), "date".into(), "date".into()])
            .expect("valid");
        assert_eq!(list, vec![ContextProvider::Memory, ContextProvider::Date]);
        let err = ContextProvider::parse("clock").expect_err("unknown");
        assert!(
            err.contains("clock") && err.contains("date, memory, budget"),
            "{err}"
        );
    }

    #[test]
    fn each_provider_says_its_line_in_the_configured_order() {
        let text = context()
            .text(&[
                ContextProvider::Budget,
                ContextProvider::Memory,
                ContextProvider::Date,
            ])
            .expect("text");
        assert_eq!(
            text,
            "[context]\nContext budget: 12% of the context window is in use (500 tokens).\n\
             Long-term memory: MEMORY.md, memory/2026-11-25.md (search with memory_search, \
             read with memory_get).\nToday's date: 2026-11-25 (UTC)."
        );
        let mut empty = context();
        empty.memory_files = Some(Vec::new());
        assert_eq!(
            empty.text(&[ContextProvider::Memory]),
            None,
            "no files, no line"
        );
    }

    #[test]
    fn the_message_goes_after_the_history_and_never_after_a_prefill() {
        let providers = [ContextProvider::Date];
        let history = vec![
            Message::system("rules"),
            Message::user("task"),
            Message::assistant("done"),
            Message::user("next"),
        ];
        let out = context()
            .assemble(&providers, Placement::AfterHistory, history.clone())
            .expect("added");
        assert_eq!(out.len(), history.len() + 1);
        assert_eq!(&out[..history.len()], &history[..]);
        assert_eq!(out[history.len()].role, Role::User);
        let mut prefill = history;
        prefill.push(Message::assistant("The answer is"));
        assert_eq!(
            context().assemble(&providers, Placement::AfterHistory, prefill.clone()),
            Err(prefill)
        );
        assert_eq!(
            context().assemble(&providers, Placement::AfterHistory, Vec::new()),
            Err(Vec::new())
        );
    }

    #[tokio::test]
    async fn the_date_is_a_date_not_a_time_of_day() {
        let prepared = Prepared {
            messages: vec![Message::user("hi")],
            input_tokens: 10,
            compacted: false,
            budget_used_pct: 1.0,
            budget_notice: None,
        };
        let key = SessionKey::simple("s").expect("key");
        let gathered =
            RequestContext::gather(&[ContextProvider::Date], None, &key, &prepared).await;
        let line = gathered.text(&[ContextProvider::Date]).expect("a line");
        let date = line
            .strip_prefix("[context]\nToday's date: ")
            .and_then(|rest| rest.strip_suffix(" (UTC)."))
            .expect("the date line");
        let shape: Vec<usize> = date.split('-').map(str::len).collect();
        assert_eq!(shape, vec![4, 2, 2], "{date:?}");
        assert!(
            date.chars().all(|c| c == '-' || c.is_ascii_digit()),
            "{date:?}"
        );
        assert_eq!(gathered.memory_files, None, "memory is off");
    }
}
