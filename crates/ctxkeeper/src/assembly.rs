//! Context assembly: what the model sees is the system prompt (base + skill instructions +
//! `on_system_prompt` hooks), then the managed context (summary first, then recent messages),
//! rewritten by transforms and completed by request-time context providers.
//!
//! Order: transforms run left to right over the history, then providers run against the
//! rewritten history, then the provider messages are placed. Provider messages are never
//! persisted. A provider whose content changes between calls (a date, a budget notice) should
//! use [`Placement::AfterHistory`]: content placed before the history would change the prefix
//! every call and defeat the provider's prompt cache.
//!
//! ```
//! use ctxkeeper::{Assembly, Placement};
//! use ctxkeeper::core::model::{Message, Role};
//!
//! let mut assembly = Assembly::new("You are a helpful agent.");
//! assembly.add_skill("search", "Find documents by keyword.");
//! assembly.add_hook(|prompt: String| format!("{prompt}\nAnswer briefly."));
//! assembly.add_transform(|mut history: Vec<Message>| { history.retain(|m| !m.text().is_empty()); history });
//! assembly.add_provider(Placement::AfterHistory, |_: &[Message]| vec![Message::user("Today is Monday.")]);
//! let messages = assembly.assemble(vec![Message::user("hi"), Message::assistant("")]);
//! assert_eq!(messages[0].role, Role::System);
//! assert!(messages[0].text().contains("search: Find documents"));
//! assert!(messages[0].text().ends_with("Answer briefly."));
//! assert_eq!(messages.len(), 3);
//! assert_eq!(messages[2].text(), "Today is Monday.");
//! ```

use ctxkeeper_core::model::Message;

/// Rewrites the history before the model call (compose several: they run left to right).
pub trait Transform: Send + Sync {
    fn transform(&self, history: Vec<Message>) -> Vec<Message>;
}

impl<F: Fn(Vec<Message>) -> Vec<Message> + Send + Sync> Transform for F {
    fn transform(&self, history: Vec<Message>) -> Vec<Message> {
        self(history)
    }
}

/// Injects request-time messages (identity, date, memory index, workspace snapshot).
pub trait ContextProvider: Send + Sync {
    fn provide(&self, history: &[Message]) -> Vec<Message>;
}

impl<F: Fn(&[Message]) -> Vec<Message> + Send + Sync> ContextProvider for F {
    fn provide(&self, history: &[Message]) -> Vec<Message> {
        self(history)
    }
}

/// Rewrites the system prompt (`on_system_prompt` middleware).
pub trait SystemPromptHook: Send + Sync {
    fn on_system_prompt(&self, prompt: String) -> String;
}

impl<F: Fn(String) -> String + Send + Sync> SystemPromptHook for F {
    fn on_system_prompt(&self, prompt: String) -> String {
        self(prompt)
    }
}

/// Where a provider's messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Before the history (after the system prompt): for content stable across calls.
    BeforeHistory,
    /// After the history: for content that changes every call, so the cached prefix holds.
    AfterHistory,
}

/// Builds the model input from a system prompt, the managed context and request-time parts.
#[derive(Default)]
pub struct Assembly {
    base: String,
    skills: Vec<(String, String)>,
    hooks: Vec<Box<dyn SystemPromptHook>>,
    transforms: Vec<Box<dyn Transform>>,
    providers: Vec<(Placement, Box<dyn ContextProvider>)>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("base", &self.base)
            .field("skills", &self.skills)
            .field("hooks", &self.hooks.len())
            .field("transforms", &self.transforms.len())
            .field("providers", &self.providers.len())
            .finish()
    }
}

impl Assembly {
    /// An assembly with a base system prompt.
    pub fn new(base: impl Into<String>) -> Assembly {
        Assembly {
            base: base.into(),
            ..Assembly::default()
        }
    }

    /// Adds a skill listed in the system prompt.
    pub fn add_skill(&mut self, name: impl Into<String>, description: impl Into<String>) {
        self.skills.push((name.into(), description.into()));
    }

    /// Adds an `on_system_prompt` hook (run in order).
    pub fn add_hook(&mut self, hook: impl SystemPromptHook + 'static) {
        self.hooks.push(Box::new(hook));
    }

    /// Adds a history transform (run left to right).
    pub fn add_transform(&mut self, transform: impl Transform + 'static) {
        self.transforms.push(Box::new(transform));
    }

    /// Adds a request-time context provider.
    pub fn add_provider(&mut self, placement: Placement, provider: impl ContextProvider + 'static) {
        self.providers.push((placement, Box::new(provider)));
    }

    /// The system prompt: base, then skills, then every hook in order.
    pub fn system_prompt(&self) -> String {
        let mut prompt = self.base.clone();
        if !self.skills.is_empty() {
            prompt.push_str("\n\n# Skills\n");
            for (name, description) in &self.skills {
                prompt.push_str(&format!("- {name}: {description}\n"));
            }
            prompt.truncate(prompt.trim_end().len());
        }
        self.hooks
            .iter()
            .fold(prompt, |p, hook| hook.on_system_prompt(p))
    }

    /// The messages for one model call: system prompt, providers placed before the history,
    /// the transformed history, providers placed after it.
    pub fn assemble(&self, history: Vec<Message>) -> Vec<Message> {
        let history = self.transforms.iter().fold(history, |h, t| t.transform(h));
        let mut before = Vec::new();
        let mut after = Vec::new();
        for (placement, provider) in &self.providers {
            let messages = provider.provide(&history);
            match placement {
                Placement::BeforeHistory => before.extend(messages),
                Placement::AfterHistory => after.extend(messages),
            }
        }
        let mut out = Vec::with_capacity(history.len() + before.len() + after.len() + 1);
        let system = self.system_prompt();
        if !system.is_empty() {
            out.push(Message::system(system));
        }
        out.extend(before);
        out.extend(history);
        out.extend(after);
        out
    }
}
