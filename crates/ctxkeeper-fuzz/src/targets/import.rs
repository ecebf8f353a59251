//! The trace importers: a trace file of any format.
//!
//! What [`ctxkeeper_core::import`] promises: nothing crashes (malformed input is an error with
//! its position), for detection as for every importer, whatever format it is given. On what
//! an importer accepts, `Trace::concat` keeps the first session whole and adds nothing, and `repair` of every session settles (see the wire targets).

use std::collections::HashMap;

use ctxkeeper_core::import::{TraceFormat, detect, import, import_claude_code};
use ctxkeeper_core::model::CheckRules;

use super::assert_repair_settles;

/// Keys and values of the trace formats, on top of the wire formats'.
pub const DICTIONARY: &[&[u8]] = &[
    br#""traj":"#,
    br#""task_id":"#,
    br#""trial":"#,
    br#""history":"#,
    br#""trajectory":"#,
    br#""trajectory_format":"mini-swe-agent-1.1""#,
    br#""info":{}"#,
    br#""replay_config":"#,
    br#""thought":"#,
    br#""action":"#,
    br#""observation":"#,
    br#""tool_call_ids":["#,
    br#""instruction":"#,
    br#""cause":"#,
    br#""args":"#,
    br#""source":"agent""#,
    br#""sessionId":"#,
    br#""uuid":"#,
    br#""parentUuid":"#,
    br#""isSidechain":true"#,
    br#""toolUseResult":"#,
    br#""leafUuid":"#,
    br#""agentId":"#,
    br#""type":"summary""#,
    br#""type":"session_meta""#,
    br#""type":"response_item""#,
    br#""type":"event_msg""#,
    br#""type":"turn_context""#,
    br#""type":"compacted""#,
    br#""payload":"#,
    br#""role":"#,
    br#""content":"#,
    br#""tool_calls":"#,
    br#""tool_call_id":"#,
    br#""type":"tool_use""#,
    br#""type":"tool_result""#,
    br#""tool_use_id":"#,
    br#""type":"function_call""#,
    br#""call_id":"#,
    br#""output":"#,
    br#""message":"#,
    b"null",
    b"true",
    b"[]",
    b"{}",
    br#""""#,
    b"0",
    b"\n",
    b"\r\n",
    b"\xef\xbb\xbf",
];

/// A trace file, detected and imported as every format.
pub fn import_trace(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for file_name in ["trace.jsonl", "run.traj", "run.traj.json"] {
        let _ = detect(&text, file_name);
    }
    for format in TraceFormat::ALL {
        let Ok(trace) = import(&text, format) else {
            continue;
        };
        let label = format.as_str();
        let total: usize = trace.sessions.iter().map(|s| s.messages.len()).sum();
        for session in &trace.sessions {
            assert_repair_settles(&session.messages, CheckRules::openai(), label);
            assert_repair_settles(&session.messages, CheckRules::anthropic(), label);
        }
        let first = trace
            .sessions
            .first()
            .map(|s| s.messages.clone())
            .unwrap_or_default();
        let joined = trace.concat();
        assert!(
            joined.messages.len() <= total,
            "{label}: concat of {total} messages made {}",
            joined.messages.len()
        );
        assert!(
            joined.messages.starts_with(&first),
            "{label}: concat did not keep the first session whole"
        );
    }
    let links = HashMap::from([("a1".to_string(), "toolu_1".to_string())]);
    let _ = import_claude_code(&text, &links);
}
