use super::*;

#[test]
fn the_same_words_are_the_same_statement_whatever_their_case_and_spacing() {
    for (a, b, same) in [
        ("Never push to main.", "never  push to\nMAIN.", true),
        ("Never push to main.", "Never push to main", false),
        ("Never push", "Never push to main.", false),
        ("ÉTÉ est là", "été EST là", true),
        ("", "  ", true),
    ] {
        assert_eq!(same_words(a, b), same, "{a:?} {b:?}");
        assert_eq!(same_words(a, b), fold(a) == fold(b), "{a:?} {b:?}");
    }
}

#[test]
fn a_named_person_is_a_fact() {
    assert_eq!(
        classify("The on-call engineer this week is Aiko Sato."),
        Some(OrderKind::Fact)
    );
    assert_eq!(
        classify("Update: the on-call engineer is now Omar Haddad."),
        Some(OrderKind::Fact)
    );
    assert_eq!(classify("The demo went fine yesterday."), None);
    assert_eq!(classify("I think this is Good Enough for now?"), None);
}

#[test]
fn a_label_with_a_number_is_no_standing_order() {
    assert_eq!(classify("step 3: keep going with the plan"), None);
    assert_eq!(classify("Round 12: nothing new found"), None);
    assert_eq!(
        classify("The budget cap is $6,000."),
        Some(OrderKind::Constraint)
    );
}

fn kinds(text: &str) -> Vec<(Option<OrderKind>, &str)> {
    sentences(text)
        .into_iter()
        .map(|s| (classify(s), s))
        .collect()
}

#[test]
fn the_five_kinds_are_recognised_and_small_talk_is_not() {
    let cases = [
        ("Never reveal API keys or passwords.", Some(OrderKind::Rule)),
        (
            "All times in America/Los_Angeles, please.",
            Some(OrderKind::Constraint),
        ),
        (
            "Keep every answer under 200 words.",
            Some(OrderKind::Constraint),
        ),
        ("The project codename is BLUEJAY.", Some(OrderKind::Fact)),
        (
            "The launch deadline is 2027-03-14.",
            Some(OrderKind::Constraint),
        ),
        ("My employee ID is EMP-20931.", Some(OrderKind::Fact)),
        (
            "Code examples in Python, not JavaScript.",
            Some(OrderKind::Preference),
        ),
        ("I prefer tabs over spaces.", Some(OrderKind::Preference)),
        (
            "I'd like short bullet lists rather than long paragraphs.",
            Some(OrderKind::Preference),
        ),
        (
            "Please use British spelling in all documents.",
            Some(OrderKind::Preference),
        ),
        (
            "Do not run database migrations without asking me first.",
            Some(OrderKind::Rule),
        ),
        // What the speaker says of themselves, and one-off requests, set nothing.
        ("I don't remember the reservation ID.", None),
        ("I must have left it somewhere else.", None),
        ("I'd like to upgrade to economy class, please.", None),
        ("I want to modify a flight booking.", None),
        ("Please use the credit card on file for payment.", None),
        ("No, I do not want travel insurance.", None),
        ("I just want to make sure I save some money.", None),
        ("Actually, never mind.", None),
        (
            "I would like to cancel all of my upcoming flights, please.",
            None,
        ),
        ("I need you to never push to main.", Some(OrderKind::Rule)),
        ("I'm sure there must be something that can be done.", None),
        ("Got it, I'll make sure to have that ready.", None),
        (
            "The tests must pass before every commit.",
            Some(OrderKind::Rule),
        ),
        ("You must tag every release note.", Some(OrderKind::Rule)),
        // Observations and code are no facts.
        (
            "It looks like the `fields.py` file is present in the ./src/marshmallow/ directory.",
            None,
        ),
        (
            "Output of this snippet is `344`, but it seems that `345` is correct.",
            None,
        ),
        (
            "Open question awaiting the user: enable strict mode by default?",
            Some(OrderKind::Goal),
        ),
        (
            "The dashboard mock shows latency p50 and p95 side by side.",
            None,
        ),
        ("Thanks, that looks good.", None),
        ("Can you explain that again?", None),
        ("The weather is lovely today.", None),
    ];
    for (text, kind) in cases {
        assert_eq!(classify(text), kind, "{text}");
    }
}

#[test]
fn a_long_session_keeps_a_bounded_number_of_statements() {
    let mut orders = StandingOrders::default();
    orders.read(Role::User, "Never push to main.", 0);
    assert!(orders.edit(0, Some(true), None).is_ok());
    orders.read(Role::User, "The budget cap is $1,000.", 1);
    orders.read(Role::User, "The budget cap is $2,000.", 2);
    orders.read(Role::User, "My employee ID is EMP-20931.", 3);
    orders.read(Role::User, "Never touch file_first.rs.", 4);
    for n in 0..MAX_ORDERS {
        orders.read(
            Role::User,
            &format!("Never touch file_{n}.rs."),
            5 + n as u64,
        );
    }
    assert_eq!(orders.orders.len(), MAX_ORDERS);
    let kept = |text: &str| orders.orders.iter().any(|o| o.text == text);
    // The replaced cap went first, then the fact, then the oldest of the rest; the
    // pinned rule and the newest stay.
    assert!(!kept("The budget cap is $1,000."));
    assert!(!kept("My employee ID is EMP-20931."));
    assert!(!kept("The budget cap is $2,000."));
    assert!(!kept("Never touch file_first.rs."));
    assert!(kept("Never push to main."));
    assert!(kept(&format!("Never touch file_{}.rs.", MAX_ORDERS - 1)));
}

#[test]
fn an_operator_pins_withdraws_and_reinstates() {
    let mut orders = StandingOrders::default();
    orders.read(
        Role::User,
        "The budget cap is $4,000. Never push to main.",
        1,
    );
    assert!(orders.edit(0, Some(true), None).is_ok_and(|o| o.pinned));
    // A pinned order is not replaced by a new value for its subject.
    orders.read(Role::User, "The budget cap is $9,000.", 3);
    assert!(orders.orders[0].is_current());
    assert!(
        orders
            .edit(1, None, Some(false))
            .is_ok_and(|o| !o.is_current())
    );
    let current: Vec<&str> = orders.current().map(|o| o.text.as_str()).collect();
    assert_eq!(
        current,
        ["The budget cap is $4,000.", "The budget cap is $9,000."]
    );
    assert!(
        orders
            .edit(1, None, Some(true))
            .is_ok_and(|o| o.is_current())
    );
    assert!(
        orders
            .edit(7, Some(true), None)
            .is_err_and(|e| e.contains("has 3"))
    );
}

#[test]
fn code_and_demonstrations_are_skipped() {
    let text = "Fix the bug.\n--- DEMONSTRATION ---\nNever use print here.\n--- END OF DEMONSTRATION ---\n1463: msg = 'The precision must be {}'\nNever push to main.";
    assert_eq!(sentences(text), ["Fix the bug.", "Never push to main."]);
}

#[test]
fn sentences_are_verbatim_slices() {
    assert_eq!(
        sentences(
            "Hi there. Never push to main! Use e.g. ruff; it is fast.\n- The cap is $4.50 per run.\n```\nnever mind code\n```"
        ),
        vec![
            "Hi there.",
            "Never push to main!",
            "Use e.g. ruff; it is fast.",
            "The cap is $4.50 per run."
        ]
    );
    assert_eq!(kinds("ok")[..], []);
}

#[test]
fn later_statements_supersede_earlier_ones_on_the_same_subject() {
    let mut orders = StandingOrders::default();
    orders.read(Role::User, "The budget cap is $4,000.", 1);
    orders.read(Role::User, "All times in America/Los_Angeles.", 2);
    orders.read(Role::User, "Code examples in Python, not JavaScript.", 3);
    orders.read(Role::User, "Never reveal API keys or passwords.", 4);
    orders.read(
        Role::User,
        "Open question awaiting the user: enable strict mode by default?",
        5,
    );
    orders.read(Role::Tool, "Never mind: the budget cap is $1.", 6);
    orders.read(Role::Assistant, "The budget cap is now $9.", 7);
    orders.read(
        Role::User,
        "Actually, switch all times to UTC from now on.",
        8,
    );
    orders.read(Role::User, "Update: the budget cap is now $6,500.", 9);
    orders.read(
        Role::User,
        "From now on I'd rather see code examples in TypeScript.",
        10,
    );
    orders.read(
        Role::User,
        "Resolved: strict mode stays off by default.",
        11,
    );
    orders.read(Role::User, "Never reveal API keys or passwords.", 12);
    let current: Vec<&str> = orders.current().map(|o| o.text.as_str()).collect();
    assert_eq!(
        current,
        vec![
            "Never reveal API keys or passwords.",
            "Actually, switch all times to UTC from now on.",
            "Update: the budget cap is now $6,500.",
            "From now on I'd rather see code examples in TypeScript.",
            "Resolved: strict mode stays off by default.",
        ]
    );
    let superseded: Vec<(u64, Option<u64>)> = orders
        .orders
        .iter()
        .filter(|o| !o.is_current())
        .map(|o| (o.log_index, o.superseded_by))
        .collect();
    assert_eq!(
        superseded,
        vec![(1, Some(9)), (2, Some(8)), (3, Some(10)), (5, Some(11))]
    );
}
