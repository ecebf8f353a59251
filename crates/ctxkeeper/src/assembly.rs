//! Context assembly: what the model sees is the system prompt (base + skill instructions +
//! `on_system_prompt` hooks), then the managed context (summary first, then recent messages),
//! rewritten by transforms and completed by request-time context providers.
//!
//! Order: transforms run left to right over the history, then providers run against the
//! rewritten history, then the provider messages are placed: [`Placement::BeforeHistory`]
//! right after the history's leading instructions (Agentrail's context providers, prepended
//! to the session history), [`Placement::AfterHistory`] after its last message. Provider
//! messages are never persisted. Content placed before the history starts the prefix a
//! provider's prompt cache serves, so it should change rarely (an identity header, a date,
//! a memory index); content that changes every call (a budget notice, a clock) belongs after
//! the history, where the whole history stays the cached prefix.
//!
//! [`crate::ContextManager::add_provider`] and [`crate::ContextManager::add_transform`] run
//! the same pipeline on every request the manager prepares.
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
//! assembly.add_provider(Placement::BeforeHistory, |_: &[Message]| vec![Message::user("Tenant: acme")]);
//! let messages = assembly.assemble(vec![Message::user("hi"), Message::assistant("")]);
//! assert_eq!(messages[0].role, Role::System);
//! assert!(messages[0].text().contains("search: Find documents"));
//! assert!(messages[0].text().ends_with("Answer briefly."));
//! assert_eq!(messages.len(), 4);
//! assert_eq!(messages[1].text(), "Tenant: acme");
//! assert_eq!(messages[3].text(), "Today is Monday.");
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

/// Where a provider's messages go (the policy's `provider_placement`).
pub use ctxkeeper_core::engine::ProviderPlacement as Placement;

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
        out.extend(history);
        let out = place(out, before, Placement::BeforeHistory);
        place(out, after, Placement::AfterHistory)
    }
}

/// Puts `provided` into `messages` at `placement`: right after the leading instructions
/// (system and developer messages), or after the last message.
pub(crate) fn place(
    mut messages: Vec<Message>,
    provided: Vec<Message>,
    placement: Placement,
) -> Vec<Message> {
    if provided.is_empty() {
        return messages;
    }
    match placement {
        Placement::AfterHistory => messages.extend(provided),
        Placement::BeforeHistory => {
            let at = messages
                .iter()
                .position(|m| !m.role.is_instruction())
                .unwrap_or(messages.len());
            messages.splice(at..at, provided);
        }
    }
    messages
}

/// The request-time hooks a [`crate::ContextManager`] runs on every request it prepares.
#[derive(Default)]
pub(crate) struct RequestHooks {
    transforms: Vec<Box<dyn Transform>>,
    providers: Vec<Box<dyn ContextProvider>>,
}

impl std::fmt::Debug for RequestHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHooks")
            .field("transforms", &self.transforms.len())
            .field("providers", &self.providers.len())
            .finish()
    }
}

impl RequestHooks {
    pub(crate) fn add_transform(&mut self, transform: Box<dyn Transform>) {
        self.transforms.push(transform);
    }

    pub(crate) fn add_provider(&mut self, provider: Box<dyn ContextProvider>) {
        self.providers.push(provider);
    }

    /// No hook: the request is the context as it is.
    pub(crate) fn is_empty(&self) -> bool {
        self.transforms.is_empty() && self.providers.is_empty()
    }

    /// Whether a transform may rewrite the history (what is sent is then not the context).
    pub(crate) fn transforms(&self) -> bool {
        !self.transforms.is_empty()
    }

    /// The messages of one call: the transforms over `context`, left to right, then the
    /// providers against what they left, their messages placed at `placement`. Also returns
    /// the provider messages, to count what the request carries beyond the context.
    pub(crate) fn apply(
        &self,
        context: Vec<Message>,
        placement: Placement,
    ) -> (Vec<Message>, Vec<Message>) {
        let history = self.transforms.iter().fold(context, |h, t| t.transform(h));
        let provided: Vec<Message> = self
            .providers
            .iter()
            .flat_map(|provider| provider.provide(&history))
            .collect();
        (place(history, provided.clone(), placement), provided)
    }
}
