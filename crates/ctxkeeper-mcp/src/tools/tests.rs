use super::*;

#[test]
fn references_are_cleaned_of_placeholder_punctuation() {
    assert_eq!(
        clean_reference(" `sessions/s1/tool_result-c.txt`] "),
        "sessions/s1/tool_result-c.txt"
    );
    assert_eq!(
        clean_reference("sessions/s1/context.jsonl#L1-L4"),
        "sessions/s1/context.jsonl#L1-L4"
    );
}

#[test]
fn hostile_paths_are_refused_before_the_archive() {
    for bad in [
        "../x",
        "sessions/../../etc/passwd",
        "/etc/passwd",
        "sessions/s1/./x",
        "a\0b",
        "a\\b",
        "file:///etc/passwd",
        "~/x",
        "",
    ] {
        assert!(check_path_like("reference", bad, 1024).is_err(), "{bad:?}");
    }
    assert!(check_path_like("reference", "sessions/s1/tool_result-a.txt", 1024).is_ok());
    assert!(check_path_like("glob", "tool_result-*", 512).is_ok());
    assert!(check_path_like("glob", &"x".repeat(600), 512).is_err());
}

#[test]
fn the_session_comes_from_the_reference() {
    assert_eq!(
        session_of_reference("sessions/s-1/tool_result-a.txt"),
        Some("s-1")
    );
    assert_eq!(session_of_reference("data/abc.png"), None);
    assert_eq!(session_of_reference("sessions/../x"), None);
}

#[test]
fn long_lines_are_excerpted_around_the_match() {
    let line = format!("{}NEEDLE{}", "a".repeat(1000), "b".repeat(1000));
    let regex = regex::Regex::new("NEEDLE").expect("valid");
    let shown = excerpt(&line, &regex, 100);
    assert!(shown.contains("NEEDLE"), "{shown}");
    assert!(shown.starts_with('…') && shown.ends_with('…'));
    assert!(shown.chars().count() <= 102);
    assert_eq!(excerpt("short NEEDLE", &regex, 100), "short NEEDLE");
}

#[test]
fn messages_render_with_their_tool_parts() {
    let message = Message::new(
        Role::Assistant,
        vec![
            Part::text("let me look"),
            Part::ToolCall {
                id: "c1".into(),
                name: "grep".into(),
                arguments: "{\"q\":1}".into(),
                extra: Default::default(),
            },
        ],
    );
    let text = render_message(&message);
    assert!(text.contains("let me look") && text.contains("[tool call grep id=c1]"));
}
