//! Errors of the core crate.

use std::fmt;

use serde_json::Value;

/// Where in an input a problem was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// A 1-based line and column, as reported by the JSON parser.
    LineColumn { line: usize, column: usize },
    /// A path into a JSON document, such as `$[3].traj[12].role`, optionally on a 1-based line
    /// of a JSON Lines file.
    Path { line: Option<usize>, path: String },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::LineColumn { line, column } => write!(f, "line {line}, column {column}"),
            Position::Path {
                line: Some(line),
                path,
            } => write!(f, "line {line}, at {path}"),
            Position::Path { line: None, path } => write!(f, "at {path}"),
        }
    }
}

/// Input that could not be parsed: its position and a reason a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {message}")]
pub struct ParseError {
    pub position: Position,
    pub message: String,
}

impl ParseError {
    /// An error at a JSON path.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> ParseError {
        ParseError {
            position: Position::Path {
                line: None,
                path: path.into(),
            },
            message: message.into(),
        }
    }

    /// Wraps a `serde_json` syntax error, which knows its line and column.
    pub fn from_json(err: &serde_json::Error) -> ParseError {
        // serde_json appends " at line L column C" to its message; the position is reported
        // separately, so strip it to keep the line readable.
        let text = err.to_string();
        let message = match text.rfind(" at line ") {
            Some(idx) => text[..idx].to_string(),
            None => text,
        };
        ParseError {
            position: Position::LineColumn {
                line: err.line(),
                column: err.column(),
            },
            message,
        }
    }

    /// Places a path error on a line of a JSON Lines file.
    pub fn on_line(mut self, line_no: usize) -> ParseError {
        self.position = match self.position {
            Position::Path { path, .. } => Position::Path {
                line: Some(line_no),
                path,
            },
            Position::LineColumn { column, .. } => Position::LineColumn {
                line: line_no,
                column,
            },
        };
        self
    }
}

/// The JSON type name of a value (`"a string"`, `"null"`), for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
