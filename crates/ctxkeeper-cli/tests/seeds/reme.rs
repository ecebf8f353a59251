//! 001 ReMe: its rows of the seed-conformance table.

use serde_json::Value;

use super::common::*;

pub fn rows(table: &mut Table) {
    // ---- 001 ReMe ---------------------------------------------------------------------------
    let seed = |section, preset| ("001 ReMe", section, preset);
    let p = policy("reme-compress");
    table.row(
        seed("Parameters", "reme-compress"),
        "max_total_tokens",
        "20000",
        at(&p, "trigger_tokens"),
    );
    table.row(
        seed("Parameters", "reme-compress"),
        "keep_recent_count (compression)",
        "2",
        at(&p, "stages.0.keep_messages"),
    );
    table.row(
        seed("Parameters", "reme-compress"),
        "grouped compression (group_token_threshold)",
        "on",
        if at(&p, "stages.0.group_token_threshold") == "unset" {
            "off"
        } else {
            "on"
        },
    );
    let p = policy("reme-auto");
    table.row(
        seed("Parameters", "reme-auto"),
        "compact_ratio_threshold",
        "0.75",
        at(&p, "stages.1.min_ratio"),
    );
    let p = policy("reme-compact");
    table.row(
        seed("Parameters", "reme-compact"),
        "max_tool_message_tokens",
        "2000",
        at(&p, "stages.0.min_result_tokens"),
    );

    let scratch = tempfile::tempdir().expect("temp dir");
    let file = trace(scratch.path(), "coding.json", coding_session(16, 80));
    let report = replay(&file, "reme-compress", 128_000, scratch.path(), &[]);
    assert!(report["compactions"].as_u64() >= Some(1), "{report}");
    let session = session_dir(&scratch.path().join("ws"));
    let groups: Vec<String> = names_in(&session)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    let well_named = !groups.is_empty()
        && groups.iter().all(|name| {
            let Some((chat_id, g)) = name.trim_end_matches(".json").rsplit_once('_') else {
                return false;
            };
            chat_id.len() == 36 && g.parse::<usize>().is_ok_and(|g| g >= 1)
        });
    table.row(
        seed("Parameters: store_dir, chat_id", "reme-compress"),
        "each group's originals in <chat_id>_<g>.json (chat_id a fresh UUID)",
        true,
        well_named,
    );
    let arrays = groups.iter().all(|name| {
        std::fs::read_to_string(session.join(name))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
    });
    table.row(
        seed("Parameters: store_dir, chat_id", "reme-compress"),
        "group file holds the group's messages (JSON array)",
        true,
        arrays,
    );
    let last = last_request(&scratch.path().join("req"));
    // The newest compaction's groups: one "[Part g/n]" message each, naming its own file (an
    // earlier compaction's group messages were compacted again; the first part also names the
    // files of the earlier summary it merged, so more files may be named than parts shown).
    let parts = last.matches("[Part ").count();
    let named = groups.iter().filter(|g| last.contains(g.as_str())).count();
    table.row(
        seed("Functionality: compress mode", "reme-compress"),
        "one [Part g/n] message per group, naming its file",
        true,
        parts >= 2 && named >= parts,
    );
    // The snapshot of an extractive summary says what happened: files, commands, errors,
    // decisions, not only its labels.
    let useful = [
        "src/billing/invoice.rs",
        "cargo test",
        "error: test invoice_",
        "Decision:",
        "Never touch the database schema",
    ]
    .iter()
    .filter(|fact| last.contains(*fact))
    .count();
    table.row(
        seed("Functionality: compress mode", "reme-compress"),
        "extractive state snapshot holds file, command, error, decision, constraint",
        "5 of 5",
        format!("{useful} of 5"),
    );
}
