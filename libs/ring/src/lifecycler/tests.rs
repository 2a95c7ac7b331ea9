use super::*;
use crate::memory::MemoryMembership;
use heddle_model::ManualClock;

fn cfg(id: &str, tokens_file: Option<PathBuf>, unregister: bool) -> LifecyclerConfig {
    LifecyclerConfig {
        instance_id: id.into(),
        instance_addr: format!("{id}:9095"),
        zone: "z1".into(),
        num_tokens: 16,
        tokens_file_path: tokens_file,
        heartbeat_period: Duration::from_secs(15),
        unregister_on_shutdown: unregister,
    }
}

fn manual_clock() -> (Arc<ManualClock>, Arc<dyn Clock>) {
    let now = Arc::new(ManualClock::new(1_000));
    (now.clone(), now)
}

#[tokio::test(start_paused = true)]
async fn joins_activates_heartbeats_and_unregisters() {
    let kv = MemoryMembership::new();
    let (now, clock) = manual_clock();
    let lc = Lifecycler::start(cfg("ing-1", None, true), kv.clone(), clock)
        .await
        .unwrap();
    let seen = kv.watch().borrow().desc.instances["ing-1"].clone();
    assert_eq!(seen.state, InstanceState::Joining);
    assert_eq!(seen.tokens.len(), 16);
    assert!(seen.tokens.windows(2).all(|w| w[0] < w[1]));
    lc.set_active().await.unwrap();
    assert_eq!(kv.watch().borrow().desc.instances["ing-1"].state, InstanceState::Active);

    now.set(20_000);
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert_eq!(
        kv.watch().borrow().desc.instances["ing-1"].heartbeat_ms,
        20_000,
        "one heartbeat after 15s"
    );

    lc.set_state(InstanceState::Leaving).await.unwrap();
    lc.stop().await.unwrap();
    assert!(kv.watch().borrow().desc.instances.is_empty(), "unregistered");
}

#[tokio::test(start_paused = true)]
async fn restart_keeps_tokens_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let kv = MemoryMembership::new();
    let (_, clock) = manual_clock();
    let first = Lifecycler::start(cfg("ing-1", Some(path.clone()), true), kv.clone(), clock.clone())
        .await
        .unwrap();
    let tokens = first.desc().await.tokens;
    first.stop().await.unwrap();
    let again = Lifecycler::start(cfg("ing-1", Some(path.clone()), true), kv.clone(), clock)
        .await
        .unwrap();
    assert_eq!(again.desc().await.tokens, tokens);
    assert_eq!(load_tokens(&path).unwrap(), Some(tokens));
}

#[tokio::test(start_paused = true)]
async fn keep_tokens_on_shutdown_leaves_a_leaving_entry_that_a_restart_reuses() {
    let kv = MemoryMembership::new();
    let (_, clock) = manual_clock();
    let first = Lifecycler::start(cfg("ing-1", None, false), kv.clone(), clock.clone())
        .await
        .unwrap();
    first.set_active().await.unwrap();
    let tokens = first.desc().await.tokens;
    first.stop().await.unwrap();
    assert_eq!(
        kv.watch().borrow().desc.instances["ing-1"].state,
        InstanceState::Leaving
    );
    let again = Lifecycler::start(cfg("ing-1", None, false), kv.clone(), clock)
        .await
        .unwrap();
    assert_eq!(
        again.desc().await.tokens,
        tokens,
        "tokens taken back from the ring entry"
    );
    assert_eq!(again.state(), InstanceState::Joining);
}

#[tokio::test(start_paused = true)]
async fn new_members_pick_tokens_nobody_owns_and_forget_is_undone_by_a_heartbeat() {
    let kv = MemoryMembership::new();
    let (_, clock) = manual_clock();
    let mut all = std::collections::BTreeSet::new();
    let mut lcs = Vec::new();
    for k in 0..5 {
        let lc = Lifecycler::start(cfg(&format!("ing-{k}"), None, true), kv.clone(), clock.clone())
            .await
            .unwrap();
        for t in lc.desc().await.tokens {
            assert!(all.insert(t), "token {t} picked twice");
        }
        lcs.push(lc);
    }
    kv.forget("ing-2").await.unwrap();
    assert!(!kv.watch().borrow().desc.instances.contains_key("ing-2"));
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(
        kv.watch().borrow().desc.instances.contains_key("ing-2"),
        "a live instance re-registers"
    );
    // A stopped one stays forgotten.
    lcs[3].stop().await.unwrap();
    kv.forget("ing-3").await.unwrap();
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(!kv.watch().borrow().desc.instances.contains_key("ing-3"));
}

#[tokio::test(start_paused = true)]
async fn state_watch_reports_changes() {
    let kv = MemoryMembership::new();
    let (_, clock) = manual_clock();
    let lc = Lifecycler::start(cfg("ing-1", None, true), kv, clock).await.unwrap();
    let mut w = lc.state_watch();
    assert_eq!(*w.borrow_and_update(), InstanceState::Joining);
    lc.set_active().await.unwrap();
    assert!(w.has_changed().unwrap());
    assert_eq!(*w.borrow_and_update(), InstanceState::Active);
}
