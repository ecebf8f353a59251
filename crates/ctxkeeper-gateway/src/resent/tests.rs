use super::*;
use ctxkeeper_core::formats::Wire;
use serde_json::{Value, json};

fn spans_of(body: &str) -> Option<MessageSpans> {
    MessageSpans::scan(body.as_bytes(), b"messages")
}

/// Each element's span, parsed, is the element serde_json finds.
fn elements_agree(body: &str) {
    let spans = spans_of(body).unwrap_or_else(|| panic!("no spans in {body}"));
    let value: Value = serde_json::from_str(body).unwrap();
    let expected = value["messages"].as_array().unwrap();
    assert_eq!(spans.elements.len(), expected.len(), "{body}");
    for (span, element) in spans.elements.iter().zip(expected) {
        let parsed: Value = serde_json::from_slice(&body.as_bytes()[span.clone()]).unwrap();
        assert_eq!(&parsed, element);
    }
}

#[test]
fn elements_are_found_through_strings_escapes_and_nesting() {
    elements_agree(r#"{"messages":[]}"#);
    elements_agree(r#" { "model" : "m" , "messages" : [ 1 , "two" , null , true ] } "#);
    elements_agree(
        r#"{"tools":[{"a":"]}"}],"messages":[{"role":"user","content":"say \"hi\" \\ [{"},{"role":"assistant","content":[{"type":"text","text":"}]"}],"x":{"y":[1,2,{"z":"\\"}]}}],"n":-1.5e3}"#,
    );
    elements_agree(
        &json!({"messages": [{"role": "user", "content": "é ☃ \u{1F600} \n\t"}]}).to_string(),
    );
}

#[test]
fn unusual_bodies_are_left_to_the_full_parse() {
    // Not an object, no array, the key twice, an escaped key, broken separators.
    for body in [
        r#"[1]"#,
        r#"{}"#,
        r#"{"model":"m"}"#,
        r#"{"messages":{"role":"user"}}"#,
        r#"{"messages":[],"messages":[]}"#,
        r#"{"mess\u0061ges":[1],"messages":[2]}"#,
        r#"{"messages":[1 2]}"#,
        r#"{"messages":[1,]"#,
        r#"{"messages":["unterminated]}"#,
        r#"{"messages":[{"a":1}}]}"#,
    ] {
        assert_eq!(spans_of(body), None, "{body}");
    }
}

/// Fed in pieces of any size, the scanner finds what it finds in the whole body.
fn pieces_agree(body: &str) {
    let body = body.as_bytes();
    let whole = {
        let mut scanner = ElementScanner::new(b"messages");
        scanner.feed(body);
        scanner.finish()
    };
    for piece in [1, 2, 3, 5, 7, 16, 64] {
        let mut scanner = ElementScanner::new(b"messages");
        let mut end = 0;
        while end < body.len() {
            end = (end + piece).min(body.len());
            scanner.feed(&body[..end]);
        }
        assert_eq!(
            scanner.finish(),
            whole,
            "pieces of {piece} bytes of {}",
            String::from_utf8_lossy(body)
        );
    }
    if let Some((spans, hashes)) = whole {
        assert_eq!(spans.hashes(body), hashes);
    }
}

#[test]
fn a_body_fed_in_pieces_scans_as_the_whole_body() {
    let bodies = [
        r#"{"messages":[]}"#.to_string(),
        r#" { "model" : "m" , "messages" : [ 1 , "two" , null , true, -1.5e3 ] , "n": 12345 } "#
            .to_string(),
        r#"{"tools":[{"a":"]}"}],"messages":[{"role":"user","content":"say \"hi\" \\ [{"},{"role":"assistant","content":[{"type":"text","text":"}]"}],"x":{"y":[1,2,{"z":"\\"}]}}],"n":-1.5e3}"#
            .to_string(),
        json!({"messages": [{"role": "user", "content": "é ☃ \u{1F600} \n\t \"q\""}], "stream": true})
            .to_string(),
        // Left to the full parse, in pieces as whole.
        r#"{"messages":[],"messages":[]}"#.to_string(),
        r#"{"mess\u0061ges":[1],"messages":[2]}"#.to_string(),
        r#"{"messages":[1 2]}"#.to_string(),
        r#"{"messages":[1,]}"#.to_string(),
        r#"{"messages":["unterminated]}"#.to_string(),
        r#"{"model":"m"}"#.to_string(),
    ];
    for body in &bodies {
        pieces_agree(body);
    }
}

/// The messages the gateway reads from `new` after `old`: the reused prefix from `old`'s
/// record, the rest parsed from the skeleton; and how many were reused.
fn read_after(wire: Wire, grouping: Grouping, old: &Value, new: &Value) -> (Vec<Message>, usize) {
    let field: &[u8] = if wire == Wire::Responses {
        b"input"
    } else {
        b"messages"
    };
    let prefixes = ResentPrefixes::default();
    let key: PrefixKey = ("tenant".into(), "session".into(), "test");
    let scan = |body: &[u8]| {
        let mut scanner = ElementScanner::new(field);
        scanner.feed(body);
        scanner
    };
    let old_bytes = old.to_string().into_bytes();
    let reading = Reading::start(&prefixes, key.clone(), scan(&old_bytes), grouping).unwrap();
    let messages = wire.parse_request_owned(old.clone()).unwrap().messages;
    let fingerprints = (0..messages.len() as u128).collect();
    let record = reading
        .record(messages, fingerprints, old_bytes.len())
        .unwrap();
    prefixes.put(key.clone(), record);
    let new_bytes = new.to_string().into_bytes();
    let mut reading = Reading::start(&prefixes, key, scan(&new_bytes), grouping).unwrap();
    match reading.skeleton(&new_bytes) {
        Some(skeleton) => {
            let mut request = wire.parse_request_owned(skeleton).unwrap();
            let reused = reading.splice(&mut request.messages).unwrap();
            (request.messages, reused)
        }
        None => (wire.parse_request_owned(new.clone()).unwrap().messages, 0),
    }
}

fn responses(input: &[Value]) -> Value {
    json!({"model": "m", "instructions": "Be brief.", "input": input})
}

#[test]
fn responses_items_are_reused_only_where_the_messages_they_form_are_the_same() {
    let user = |text: &str| json!({"role": "user", "content": text});
    let said = |text: &str| {
        json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": text}]})
    };
    let reasoning = |n: usize| json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": []});
    let call = |n: usize| {
        json!({"type": "function_call", "call_id": format!("c{n}"),
        "name": "ls", "arguments": "{}"})
    };
    let output = |n: usize| json!({"type": "function_call_output", "call_id": format!("c{n}"), "output": "a.rs"});
    let base = vec![user("list the files"), reasoning(1), call(1), output(1)];
    let cases: Vec<(&str, Vec<Value>, Vec<Value>)> = vec![
        (
            "a round appended",
            base.clone(),
            [base.clone(), vec![reasoning(2), call(2), output(2)]].concat(),
        ),
        // The new call joins the assistant message the old history ended on.
        (
            "a call after a closing assistant message",
            [base.clone(), vec![said("checking")]].concat(),
            [base.clone(), vec![said("checking"), call(2), output(2)]].concat(),
        ),
        // The new item differs where a user message was, and joins the message before.
        (
            "a call where a user message was",
            [base.clone(), vec![said("done"), user("thanks")]].concat(),
            [base.clone(), vec![said("done"), call(3), output(3)]].concat(),
        ),
        ("the same history again", base.clone(), base.clone()),
    ];
    for (name, old, new) in cases {
        let (read, reused) = read_after(
            Wire::Responses,
            Grouping::ResponsesItems,
            &responses(&old),
            &responses(&new),
        );
        let full = Wire::Responses
            .parse_request_owned(responses(&new))
            .unwrap()
            .messages;
        assert_eq!(read, full, "{name}");
        assert!(reused > 0, "{name}: something was reused");
    }
}

#[test]
fn chat_messages_are_reused_up_to_the_first_edit() {
    let old = json!({"messages": [{"role": "system", "content": "s"},
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]});
    let new = json!({"messages": [{"role": "system", "content": "s"},
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "B"},
        {"role": "user", "content": "c"}]});
    let (read, reused) = read_after(Wire::OpenAiChat, Grouping::OnePerElement, &old, &new);
    assert_eq!(
        read,
        Wire::OpenAiChat.parse_request_owned(new).unwrap().messages
    );
    assert_eq!(reused, 2);
}

#[test]
fn the_skeleton_parses_to_the_body_without_the_prefix() {
    let body = json!({
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "stream": true
    })
    .to_string();
    let spans = spans_of(&body).unwrap();
    for from in 0..=3 {
        let skeleton: Value =
            serde_json::from_slice(&spans.skeleton(body.as_bytes(), from)).unwrap();
        let mut expected: Value = serde_json::from_str(&body).unwrap();
        let messages = expected["messages"].as_array_mut().unwrap();
        messages.drain(..from);
        assert_eq!(skeleton, expected, "from {from}");
    }
}

#[test]
fn hashes_tell_an_edited_element_from_a_resent_one() {
    let first =
        r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
    let second = r#"{"messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"B"},{"role":"user","content":"c"}]}"#;
    let a = spans_of(first).unwrap().hashes(first.as_bytes());
    let b = spans_of(second).unwrap().hashes(second.as_bytes());
    let record = KnownPrefix {
        element_hashes: a,
        cuts: vec![Some(0), Some(1), Some(2)],
        lead: 0,
        messages: Vec::new(),
        fingerprints: Vec::new(),
        bytes: 0,
        forwarded_as_sent: false,
    };
    assert_eq!(record.common(&b), 1);
}

fn record(bytes: usize, lead: usize, elements: usize) -> KnownPrefix {
    KnownPrefix {
        element_hashes: (0..elements as u128).collect(),
        cuts: (0..=elements).map(Some).collect(),
        lead,
        messages: (0..lead + elements)
            .map(|i| Message::user(format!("m{i}")))
            .collect(),
        fingerprints: (0..(lead + elements) as u128).collect(),
        bytes,
        forwarded_as_sent: false,
    }
}

#[test]
fn a_prefix_drops_the_lead_and_what_follows() {
    let (messages, fingerprints) = record(0, 1, 4).into_prefix(2);
    assert_eq!(messages, vec![Message::user("m1"), Message::user("m2")]);
    assert_eq!(fingerprints, vec![1, 2]);
}

#[test]
fn the_bound_evicts_the_least_recently_kept() {
    let prefixes = ResentPrefixes::new(100);
    let key = |s: &str| (String::from("t"), s.to_string(), "chat");
    assert!(prefixes.put(key("a"), record(40, 0, 1)).is_empty());
    assert!(prefixes.put(key("b"), record(40, 0, 1)).is_empty());
    // Taking and putting back makes `a` the most recent.
    let a = prefixes.take(&key("a")).unwrap();
    assert!(prefixes.put(key("a"), a).is_empty());
    let freed = prefixes.put(key("c"), record(40, 0, 1));
    assert_eq!(freed.len(), 1);
    assert!(prefixes.take(&key("b")).is_none(), "b was the oldest");
    assert!(prefixes.take(&key("a")).is_some());
    assert_eq!(prefixes.kept_bytes(), 40);
    // A record over the whole bound is not kept.
    assert_eq!(prefixes.put(key("d"), record(101, 0, 1)).len(), 1);
    assert!(prefixes.take(&key("d")).is_none());
}

#[test]
fn records_idle_past_the_session_idle_time_are_taken_out() {
    let prefixes = ResentPrefixes::new(1000);
    let key = |s: &str| (String::from("t"), s.to_string(), "chat");
    prefixes.put(key("old"), record(40, 0, 1));
    std::thread::sleep(Duration::from_millis(30));
    let between = Instant::now();
    prefixes.put(key("new"), record(30, 0, 1));
    let idle = Duration::from_millis(20);
    // Nothing is idle yet as of when the first was kept.
    assert!(prefixes.take_idle(idle, between - idle).is_empty());
    let freed = prefixes.take_idle(idle, between + Duration::from_millis(10));
    assert_eq!(freed.iter().map(|r| r.bytes).collect::<Vec<_>>(), vec![40]);
    assert_eq!(prefixes.kept_bytes(), 30);
    assert!(prefixes.take(&key("old")).is_none());
    // Put back, a record counts as kept anew.
    let new = prefixes.take(&key("new")).unwrap();
    prefixes.put(key("new"), new);
    assert!(prefixes.take_idle(idle, Instant::now()).is_empty());
    assert_eq!(prefixes.take_idle(idle, Instant::now() + idle).len(), 1);
    assert_eq!(prefixes.kept_bytes(), 0);
}
