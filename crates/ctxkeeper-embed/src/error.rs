//! The errors of an embedded session, one enum every face maps onto its own exception
//! classes (Python's `ctxkeeper_engine.errors`, the npm package's error classes).

use ctxkeeper_core::ParseError;
use ctxkeeper_store::StoreError;

/// The class an error belongs to in every face (`InvalidInputError`, `ConfigError`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Base,
    InvalidInput,
    Config,
    Store,
    Conflict,
    NotFound,
    Archive,
    NoRoom,
    Unrecoverable,
}

impl Class {
    /// The class's name in every face.
    pub fn name(self) -> &'static str {
        match self {
            Class::Base => "CtxkeeperError",
            Class::InvalidInput => "InvalidInputError",
            Class::Config => "ConfigError",
            Class::Store => "StoreError",
            Class::Conflict => "ConflictError",
            Class::NotFound => "NotFoundError",
            Class::Archive => "ArchiveError",
            Class::NoRoom => "NoRoomError",
            Class::Unrecoverable => "UnrecoverableError",
        }
    }

    /// The class of a store error.
    pub fn of_store(err: &StoreError) -> Class {
        if err.is_conflict() {
            Class::Conflict
        } else if err.is_not_found() {
            Class::NotFound
        } else if matches!(err, StoreError::InvalidInput(_)) || err.is_forbidden() {
            Class::InvalidInput
        } else {
            Class::Store
        }
    }

    /// The class of an error of the context manager.
    pub fn of_manager(err: &ctxkeeper::Error) -> Class {
        match err {
            ctxkeeper::Error::Archive(_) => Class::Archive,
            ctxkeeper::Error::Config(_) => Class::Config,
            ctxkeeper::Error::Unrecoverable { .. } => Class::Unrecoverable,
            ctxkeeper::Error::NoRoom { .. } => Class::NoRoom,
            _ => Class::Base,
        }
    }
}

/// Why a call of an embedded session failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Input the session refuses (a message, a tool list, an argument); nothing was ingested
    /// or stored. `path` names the place (`messages[2].role`), `index` the message of the
    /// batch when one is to blame, `kind` the rule (`tool_pairing`, `hostile_id`,
    /// `invalid_message`) when it is not a parse error.
    #[error("{message}")]
    InvalidInput {
        message: String,
        path: Option<String>,
        index: Option<usize>,
        kind: Option<&'static str>,
    },
    /// An unknown preset, an invalid override, a bad option.
    #[error("{0}")]
    Config(String),
    /// A store or archive could not be opened (`url` is redacted).
    #[error("cannot open the {what} {url}: {source}")]
    Open {
        what: &'static str,
        url: String,
        #[source]
        source: StoreError,
    },
    /// The session store or the archive failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The context manager failed.
    #[error(transparent)]
    Manager(#[from] ctxkeeper::Error),
    /// The engine failed on `messages[index]` of a batch (an archive write): the ones before
    /// it were ingested.
    #[error("{source} (messages[{index}] and later were not ingested)")]
    Ingest {
        index: usize,
        #[source]
        source: ctxkeeper::Error,
    },
    /// Anything else (the async runtime would not start, a value would not convert).
    #[error("{0}")]
    Other(String),
}

impl EmbedError {
    /// Refused input with no position.
    pub fn invalid(message: impl Into<String>) -> EmbedError {
        EmbedError::InvalidInput {
            message: message.into(),
            path: None,
            index: None,
            kind: None,
        }
    }

    /// A refused option or configuration.
    pub fn config(message: impl Into<String>) -> EmbedError {
        EmbedError::Config(message.into())
    }

    /// A parse error of the caller's input (`what`: `messages`, `tools`, `system`): the
    /// message and path name the place (`messages[2].role: unknown role`).
    pub fn parse(what: &str, err: &ParseError) -> EmbedError {
        let path = err.position.to_string();
        let path = path.strip_prefix("at ").unwrap_or(&path).to_string();
        let shown = path.replacen('$', what, 1);
        EmbedError::InvalidInput {
            message: format!("{shown}: {}", err.message),
            path: Some(shown),
            index: None,
            kind: None,
        }
    }

    /// The class this error belongs to.
    pub fn class(&self) -> Class {
        match self {
            EmbedError::InvalidInput { .. } => Class::InvalidInput,
            EmbedError::Config(_) => Class::Config,
            EmbedError::Open { .. } => Class::Store,
            EmbedError::Store(err) => Class::of_store(err),
            EmbedError::Manager(err) | EmbedError::Ingest { source: err, .. } => {
                Class::of_manager(err)
            }
            EmbedError::Other(_) => Class::Base,
        }
    }

    /// The figures an error carries, by name (`needed`/`limit` of a `NoRoomError`,
    /// `attempts`/`tokens` of an `UnrecoverableError`, `index` of a failed ingest).
    pub fn figures(&self) -> Vec<(&'static str, u64)> {
        let manager = match self {
            EmbedError::Manager(err) => err,
            EmbedError::Ingest { index, source } => {
                let mut figures = vec![("index", *index as u64)];
                figures.extend(EmbedError::manager_figures(source));
                return figures;
            }
            _ => return Vec::new(),
        };
        EmbedError::manager_figures(manager)
    }

    fn manager_figures(err: &ctxkeeper::Error) -> Vec<(&'static str, u64)> {
        match err {
            ctxkeeper::Error::Unrecoverable { attempts, tokens } => {
                vec![("attempts", u64::from(*attempts)), ("tokens", *tokens)]
            }
            ctxkeeper::Error::NoRoom { needed, limit } => {
                vec![("needed", *needed), ("limit", *limit)]
            }
            _ => Vec::new(),
        }
    }
}
