//! `ctxkeeper inspect`: what a trace holds and what it costs.

use std::fmt::Write as _;

use anyhow::Result;
use clap::Args;
use ctxkeeper_core::model::CheckRules;
use ctxkeeper_core::stats::{Tally, TraceStats, thousands};
use serde_json::json;

use crate::TraceArgs;
use crate::trace_input::{self, LoadedTrace};

/// Arguments of `ctxkeeper inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// How many of the largest items to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
}

/// Runs the command.
pub fn run(args: &InspectArgs) -> Result<()> {
    let loaded = trace_input::load(&args.trace)?;
    // A stored trace may end while tools still run, so the trailing round may be open.
    let stats = TraceStats::compute(
        &loaded.sessions,
        &loaded.tokens,
        &CheckRules::history(),
        args.top,
    );
    if args.trace.json {
        let profile = &loaded.tokens.profile;
        let body = json!({
            "trace": loaded.path.display().to_string(),
            "format": loaded.format.as_str(),
            "model": loaded.model,
            "window": profile.context_window,
            "sessions": loaded.sessions.iter().map(|session| json!({
                "id": session.id,
                "messages": session.messages.len(),
                "parent": session.parent.as_ref().map(|parent| json!({
                    "session": parent.session,
                    "tool_call_id": parent.tool_call_id,
                })),
            })).collect::<Vec<_>>(),
            "import_warnings": loaded.warnings,
            "stats": stats,
        });
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        print!("{}", render(&loaded, &stats));
    }
    Ok(())
}

fn render(loaded: &LoadedTrace, stats: &TraceStats) -> String {
    let mut out = String::new();
    let profile = &loaded.tokens.profile;
    let _ = writeln!(
        out,
        "{}  ({}, {} session{}, {} messages)",
        loaded.path.display(),
        loaded.format.as_str(),
        stats.sessions,
        if stats.sessions == 1 { "" } else { "s" },
        thousands(stats.messages as u64)
    );
    let _ = writeln!(
        out,
        "model {}  window {} tokens  tokenizer {:?}",
        loaded.model,
        thousands(profile.context_window),
        profile.tokenizer
    );
    let _ = writeln!(
        out,
        "total {} tokens (tool schemas {})\n",
        thousands(stats.total_tokens),
        thousands(stats.tool_schema_tokens)
    );
    // Sub-agent conversations are listed with the call that started them, so the sessions
    // of one trace read as the tree they were.
    if loaded.sessions.iter().any(|s| s.parent.is_some()) {
        let _ = writeln!(out, "sessions:");
        for session in &loaded.sessions {
            let origin = match &session.parent {
                None => "main conversation".to_string(),
                Some(parent) => match &parent.tool_call_id {
                    Some(call) => format!("sub-agent of {} (tool call {call})", parent.session),
                    None => format!(
                        "sub-agent of {} (its call is not in the file)",
                        parent.session
                    ),
                },
            };
            let _ = writeln!(
                out,
                "  {}  {} messages  {origin}",
                session.id,
                thousands(session.messages.len() as u64)
            );
        }
        out.push('\n');
    }

    let roles = stats
        .by_role
        .iter()
        .map(|(role, tally)| (role.as_str(), *tally));
    write_tallies(&mut out, ("role", "messages"), roles, stats.total_tokens);
    out.push('\n');
    let kinds = stats.part_kinds_in_order().into_iter();
    let kinds = kinds.map(|(kind, tally)| (kind.as_str(), tally));
    write_tallies(&mut out, ("part kind", "parts"), kinds, stats.total_tokens);

    let _ = writeln!(
        out,
        "\ntool calls: {} ({} distinct ids)",
        thousands(stats.tool_calls),
        thousands(stats.distinct_tool_call_ids as u64)
    );
    let mut by_name: Vec<_> = stats.tool_calls_by_name.iter().collect();
    by_name.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (name, count) in by_name.iter().take(10) {
        let _ = writeln!(out, "  {:<30}{:>8}", name, thousands(**count));
    }
    if by_name.len() > 10 {
        let _ = writeln!(out, "  … and {} more tools", by_name.len() - 10);
    }

    let _ = writeln!(out, "\nlargest items:");
    for item in &stats.largest {
        let _ = writeln!(
            out,
            "  {:>9} tokens  {} #{} {} {}: {}",
            thousands(item.tokens),
            item.session,
            item.message,
            item.role,
            item.kind,
            item.preview
        );
    }

    if stats.violations.is_empty() {
        let _ = writeln!(out, "\nviolations: none");
    } else {
        let _ = writeln!(out, "\nviolations: {}", stats.violations.len());
        for (kind, count) in &stats.violations_by_kind {
            let _ = writeln!(out, "  {kind:<30}{:>8}", thousands(*count));
        }
        for violation in stats.violations.iter().take(20) {
            let part = violation
                .part
                .map(|p| format!(" part {p}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} message {}{}: {}",
                violation.session, violation.message, part, violation.reason
            );
        }
        if stats.violations.len() > 20 {
            let _ = writeln!(out, "  … {} more (see --json)", stats.violations.len() - 20);
        }
    }
    if !loaded.warnings.is_empty() {
        let _ = writeln!(out, "\nskipped or kept opaque while importing:");
        for (warning, count) in &loaded.warnings {
            let _ = writeln!(out, "  {warning} ×{count}");
        }
    }
    out
}

/// One table of the report: a header naming the rows and what they count, then per row its
/// count, its tokens and their share of `total_tokens`.
fn write_tallies<'a>(
    out: &mut String,
    (rows_are, counted): (&str, &str),
    rows: impl Iterator<Item = (&'a str, Tally)>,
    total_tokens: u64,
) {
    let _ = writeln!(
        out,
        "{:<14}{:>10}{:>14}{:>8}",
        rows_are, counted, "tokens", "share"
    );
    for (name, tally) in rows {
        let _ = writeln!(
            out,
            "{:<14}{:>10}{:>14}{:>7.1}%",
            name,
            thousands(tally.count),
            thousands(tally.tokens),
            share(tally.tokens, total_tokens)
        );
    }
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}
