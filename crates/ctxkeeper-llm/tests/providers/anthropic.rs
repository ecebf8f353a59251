//! The Anthropic Messages summarizer against the mock: forced tool use, its refusals and
//! fallbacks, repaired input, retries, and transport failures.

use super::*;

#[tokio::test]
async fn anthropic_forced_tool_use_is_read_and_the_request_is_well_formed() {
    let mock = Mock::start(
        vec![reply(200, anthropic_tool_use(summary_json("claude")))],
        None,
    )
    .await;
    let summarizer = anthropic(&mock);
    let summary = summary_of(&summarizer).await;
    assert_eq!(summary.produced_by, "anthropic:claude-test");
    assert!(summary.get("task_overview").contains("(claude)"));
    assert_eq!(mock.paths(), vec!["/v1/messages"]);
    assert_eq!(mock.header(0, "x-api-key").as_deref(), Some("sk-ant-test"));
    assert_eq!(
        mock.header(0, "anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(mock.header(0, "authorization"), None);
    let body = &mock.bodies()[0];
    assert_valid_anthropic(body);
    assert!(
        body["system"]
            .as_str()
            .is_some_and(|s| s.contains("untrusted data"))
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "record_summary"})
    );
}

#[tokio::test]
async fn anthropic_refused_forced_tool_falls_back_to_auto_then_text() {
    let tools_refusal = anthropic_error(
        400,
        "invalid_request_error",
        "tools: this model does not support tools",
    );
    let script = vec![
        anthropic_forced_tool_refusal(),
        tools_refusal,
        reply(200, anthropic_text(&summary_json("plain").to_string())),
    ];
    let mock = Mock::start(script, None).await;
    let summarizer = anthropic(&mock);
    let summary = summary_of(&summarizer).await;
    assert!(summary.get("task_overview").contains("(plain)"));
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[1]["tool_choice"], json!({"type": "auto"}));
    assert!(bodies[2].get("tools").is_none());
    assert_eq!(summarizer.output_mode(), OutputMode::Text);
    for body in &bodies {
        assert_valid_anthropic(body);
    }
}

#[tokio::test]
async fn anthropic_auto_tool_answer_in_text_is_accepted() {
    let script = vec![
        anthropic_forced_tool_refusal(),
        reply(
            200,
            anthropic_text(&format!("Summary follows. {}", summary_json("auto"))),
        ),
    ];
    let mock = Mock::start(script, None).await;
    let summary = summary_of(&anthropic(&mock)).await;
    assert!(summary.get("task_overview").contains("(auto)"));
    assert_eq!(mock.count(), 2);
}

#[tokio::test]
async fn anthropic_invalid_tool_input_is_repaired() {
    let script = vec![
        reply(
            200,
            anthropic_tool_use(json!({"task_overview": "only this"})),
        ),
        reply(200, anthropic_tool_use(json!({"task_overview": 3}))),
        reply(200, anthropic_tool_use(summary_json("third"))),
    ];
    let mock = Mock::start(script, None).await;
    let summary = summary_of(&anthropic(&mock)).await;
    assert!(summary.get("task_overview").contains("(third)"));
    let bodies = mock.bodies();
    assert!(user_text(&bodies[1]).contains("missing field(s): current_state"));
    assert!(user_text(&bodies[2]).contains("must be a string"));
}

#[tokio::test]
async fn anthropic_overloaded_is_retried_by_the_wrapper() {
    let overloaded = anthropic_error(529, "overloaded_error", "Overloaded");
    let script = vec![
        overloaded,
        reply(200, anthropic_tool_use(summary_json("later"))),
    ];
    let mock = Mock::start(script, None).await;
    let resilient = Resilient::with_policy(anthropic(&mock), quick_retries(3));
    let outcome = resilient.summarize_reported(&request(session())).await;
    assert_eq!(outcome.attempts, 2);
    assert!(outcome.summary.get("task_overview").contains("(later)"));
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error() {
    // Bind and drop a listener to get a port nothing listens on.
    let address = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        listener.local_addr().expect("address")
    };
    let mut config =
        OpenAiConfig::new(format!("http://{address}/v1"), "m").with_api_key("sk-must-not-leak");
    config.options.connect_timeout = Duration::from_millis(500);
    let error = OpenAiSummarizer::new(config)
        .expect("config")
        .summarize(&request(session()))
        .await
        .expect_err("refused");
    assert!(
        matches!(error, LlmError::Transport { .. } | LlmError::Timeout),
        "{error:?}"
    );
    assert!(!error.to_string().contains("sk-must-not-leak"));
}

#[tokio::test]
async fn nothing_to_summarize_sends_nothing_and_keeps_the_previous_summary() {
    let mock = Mock::start(Vec::new(), None).await;
    let mut req = request(Vec::new());
    let mut previous = Summary::empty(&req.schema, "extractive");
    previous.set("task_overview", "Earlier work.");
    req.previous = Some(previous.clone());
    let summary = openai(&mock, |_| {})
        .summarize(&req)
        .await
        .expect("a summary");
    assert_eq!(summary, previous);
    assert_eq!(mock.count(), 0);
}
