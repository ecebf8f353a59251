//! What the host's observer (the gateway's tracing) learns of each answered tool call.

use super::*;

/// Keeps every record the server reports.
#[derive(Debug, Default)]
struct Recorded(std::sync::Mutex<Vec<ctxkeeper_mcp::ToolCallRecord>>);

impl ctxkeeper_mcp::ToolCallObserver for Recorded {
    fn tool_called(&self, call: &ctxkeeper_mcp::ToolCallRecord) {
        self.0.lock().expect("lock").push(call.clone());
    }
}

#[tokio::test]
async fn every_answered_tool_call_is_reported_with_its_outcome_and_trace() -> anyhow_free::Result {
    use rmcp::ServiceExt;
    use rmcp::model::{CallToolRequestParams, RequestMetaObject};

    let f = fixture().await;
    let recorded = Arc::new(Recorded::default());
    let server = ContextServer::new(
        Services {
            store: f.store.clone(),
            archive: f.archive.clone(),
            memory: Some(f.memory.clone()),
            summarizer: Arc::new(ExtractiveSummarizer::default()),
            tool_calls: Some(recorded.clone()),
        },
        Options {
            tenant: "default".into(),
            session: Some("s1".into()),
            policy: presets::preset("default").expect("preset"),
            model: TokenModel::for_model("gpt-4o", &Profiles::builtin()),
            window: 128_000,
        },
    )?;
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let running = tokio::spawn(async move {
        if let Ok(service) = server.serve(server_io).await {
            let _ = service.waiting().await;
        }
    });
    let client = ().serve(client_io).await?;
    let arguments = |value: Value| value.as_object().cloned().expect("object");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(traceparent);
    let mut traced = CallToolRequestParams::new("context_read")
        .with_arguments(arguments(json!({"reference": f.output_ref, "limit": 20})));
    traced.meta = Some(meta);
    assert_eq!(client.call_tool(traced).await?.is_error, Some(false));
    let hostile = client.call_tool(hostile_read()).await?;
    assert_eq!(hostile.is_error, Some(true));
    // The kind travels in the result's `_meta` too, for programs.
    let kind = hostile
        .meta
        .as_ref()
        .and_then(|meta| meta.get(ctxkeeper_mcp::observe::ERROR_KIND_META))
        .and_then(Value::as_str)
        .map(str::to_string);
    let unknown = client
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await;
    assert!(unknown.is_err(), "an unknown tool is a JSON-RPC error");
    client.cancel().await?;
    running.abort();

    let records = recorded.0.lock().expect("lock").clone();
    let seen: Vec<(&str, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.error.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("context_read", None),
            ("context_read", kind.as_deref()),
            ("no_such_tool", Some("jsonrpc -32602")),
        ]
    );
    assert!(
        matches!(kind.as_deref(), Some("invalid" | "forbidden")),
        "{kind:?}"
    );
    assert_eq!(records[0].traceparent.as_deref(), Some(traceparent));
    assert_eq!(records[1].traceparent, None);
    for record in &records {
        assert_eq!(record.tenant, "default");
        assert_eq!(record.session.as_deref(), Some("s1"));
        assert!(!record.request_id.is_empty());
        // Over stdio there is no MCP session header.
        assert_eq!(record.mcp_session, None);
    }
    let ids: std::collections::HashSet<_> = records.iter().map(|r| &r.request_id).collect();
    assert_eq!(ids.len(), 3, "each call has its own JSON-RPC id");
    Ok(())
}
