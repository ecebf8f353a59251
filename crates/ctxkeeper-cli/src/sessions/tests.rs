use super::*;
use ctxkeeper_core::model::Message;
use ctxkeeper_store::AgentState;

fn args(store: &str, command: SessionsCommand) -> SessionsArgs {
    SessionsArgs {
        store: Some(store.to_string()),
        tenant: "default".into(),
        user: None,
        agent: None,
        json: false,
        command,
    }
}

async fn run_to_string(args: &SessionsArgs) -> Result<String> {
    let mut out = String::new();
    execute(args, &mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn show_finds_what_the_gateway_archived_into_its_workspace() -> Result<()> {
    // The gateway archives into its workspace directory, not the SQL store: `show`
    // without --archive used to read only the store and said "archived none".
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let workspace = workspace.display().to_string();
    let store = open_store(&url).await?;
    let key = SessionKey::new("default", "default", "default", "g1")?;
    let mut state = AgentState::new();
    state.context = vec![Message::user("look at the logs")];
    store.save(&key, &state, None).await?;
    open_archive(&workspace)
        .await?
        .offload_tool_result(&key.archive_scope(), "c9", "a long log")
        .await?;
    let archives = archives_to_read(None, &url, &workspace);
    assert_eq!(archives, vec![workspace.clone(), url.clone()]);
    let mut shown = String::new();
    let show_args = args(
        &url,
        SessionsCommand::Show {
            session: "g1".into(),
            model: "gpt-4o".into(),
            archive: None,
        },
    );
    show(&show_args, &*store, "g1", "gpt-4o", &archives, &mut shown).await?;
    assert!(shown.contains("archived    1 item(s)"), "{shown}");
    assert!(shown.contains("tool_result-c9"), "{shown}");
    Ok(())
}

#[tokio::test]
async fn show_history_search_clear_and_gc_work_end_to_end() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store = open_store(&url).await?;
    let key = SessionKey::new("default", "default", "default", "s1")?;
    let mut state = AgentState::new();
    state.context = vec![
        Message::system("rules"),
        Message::user("check the disk"),
        Message::tool_result("c1", "ERROR: disk full on /var"),
        Message::assistant("The disk is full."),
    ];
    state.summary = Some(json!({"task_overview": "disk"}));
    store.save(&key, &state, None).await?;
    store.append(&key, &state.context).await?;
    let archive = open_archive(&url).await?;
    archive
        .offload_tool_result(&key.archive_scope(), "c1", "ERROR: disk full on /var")
        .await?;

    let shown = run_to_string(&args(
        &url,
        SessionsCommand::Show {
            session: "s1".into(),
            model: "gpt-4o".into(),
            archive: None,
        },
    ))
    .await?;
    assert!(
        shown.contains("messages    4 in context, 4 in the session log"),
        "{shown}"
    );
    assert!(
        shown.contains("system 1, user 1, assistant 1, tool 1"),
        "{shown}"
    );
    assert!(
        shown.contains("summary     present (task_overview)"),
        "{shown}"
    );
    assert!(shown.contains("sessions/s1/tool_result-c1.txt"), "{shown}");

    let history = run_to_string(&args(
        &url,
        SessionsCommand::History {
            session: "s1".into(),
            last: 2,
            before: None,
        },
    ))
    .await?;
    assert_eq!(history.lines().count(), 2);
    assert!(history.contains("#4"), "{history}");

    let hits = run_to_string(&args(
        &url,
        SessionsCommand::Search {
            query: "disk full".into(),
            session: None,
            limit: 5,
        },
    ))
    .await?;
    // Both words beat one word; every hit names its session.
    let order: Vec<&str> = hits.lines().map(|l| &l[..6]).collect();
    assert!(
        order[..2].contains(&"s1  #3") && order[..2].contains(&"s1  #4"),
        "{hits}"
    );
    assert_eq!(order[2], "s1  #2", "{hits}");

    let listed = run_to_string(&args(&url, SessionsCommand::List)).await?;
    assert!(
        listed.contains("s1") && listed.contains("1 session(s)"),
        "{listed}"
    );

    let gc = run_to_string(&args(
        &url,
        SessionsCommand::Gc {
            older_than: Some("30d".into()),
            policy: None,
            all_tenants: false,
            workspace: None,
        },
    ))
    .await?;
    assert!(gc.starts_with("removed 0 session(s)"), "{gc}");
    let cleared = run_to_string(&args(
        &url,
        SessionsCommand::Clear {
            session: "s1".into(),
        },
    ))
    .await?;
    assert!(cleared.starts_with("cleared"), "{cleared}");
    assert!(store.load(&key).await?.is_none());
    Ok(())
}

#[test]
fn ages_and_numbers_parse() -> Result<()> {
    assert_eq!(parse_age("30d")?, Duration::from_secs(30 * 86_400));
    assert_eq!(parse_age("90m")?, Duration::from_secs(5_400));
    assert_eq!(parse_age("15")?, Duration::from_secs(15));
    assert!(parse_age("3w").is_err());
    assert_eq!(thousands(1_234_567), "1,234,567");
    assert_eq!(thousands(12), "12");
    assert!(default_store_url().starts_with("sqlite://"));
    Ok(())
}
