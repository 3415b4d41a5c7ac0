//! Behaviour of the KV cache manager: prefix caching, sink windows, and the pool's invariants under random
//! workloads (property tests).

use docqa_engine::kv::manager::{CacheScope, KvCacheConfig, KvCacheManager, SinkWindow};
use proptest::prelude::*;

fn manager(num_blocks: usize, block_size: usize, caching: bool) -> KvCacheManager {
    KvCacheManager::new(KvCacheConfig {
        block_size,
        num_blocks,
        enable_prefix_caching: caching,
        cache_salt: 0,
    })
    .unwrap()
}

const DENSE: CacheScope = CacheScope {
    namespace: 0,
    sink_window: None,
    transient: false,
    scratch: false,
};

fn windowed(num_sink_tokens: usize, window: usize) -> CacheScope {
    CacheScope {
        namespace: 0,
        sink_window: Some(SinkWindow {
            num_sink_tokens,
            window,
        }),
        transient: false,
        scratch: false,
    }
}

fn run_whole(kv: &mut KvCacheManager, id: u64, tokens: &[u32]) {
    run_whole_in(kv, id, tokens, DENSE);
}

fn run_whole_in(kv: &mut KvCacheManager, id: u64, tokens: &[u32], scope: CacheScope) {
    let prefix = kv.find_cached_prefix(tokens, scope, true);
    assert!(kv.allocate(id, tokens.len(), Some(&prefix)).unwrap());
    kv.commit_computed(id, tokens, tokens.len()).unwrap();
}

#[test]
fn a_second_request_with_the_same_document_reuses_its_full_blocks() {
    let mut kv = manager(64, 16, true);
    let doc: Vec<u32> = (0..100).collect();
    let mut first = doc.clone();
    first.extend([7000, 7001, 7002]);
    run_whole(&mut kv, 1, &first);
    kv.free(1).unwrap();

    let mut second = doc.clone();
    second.extend([8000, 8001]);
    let hit = kv.find_cached_prefix(&second, DENSE, true);
    assert_eq!(
        hit.num_tokens, 96,
        "six full blocks of the shared 100-token document"
    );
    assert!(kv.allocate(2, second.len(), Some(&hit)).unwrap());
    let table = kv.block_table(2).unwrap().to_vec();
    let first_blocks: Vec<_> = table[..6].iter().map(|b| b.unwrap()).collect();
    assert_eq!(kv.prefix_stats().hit_tokens, 96);
    kv.commit_computed(2, &second, second.len()).unwrap();
    kv.free(2).unwrap();
    assert_eq!(kv.pool().num_used(), 0);
    for b in first_blocks {
        assert_eq!(kv.pool().ref_count(b), 0);
    }
}

#[test]
fn a_prompt_that_is_entirely_cached_still_computes_its_last_token() {
    let mut kv = manager(16, 4, true);
    let tokens: Vec<u32> = (0..16).collect();
    run_whole(&mut kv, 1, &tokens);
    kv.free(1).unwrap();
    let hit = kv.find_cached_prefix(&tokens, DENSE, false);
    assert_eq!(
        hit.num_tokens, 12,
        "the block holding the last token is recomputed"
    );
}

#[test]
fn two_live_requests_share_prefix_blocks_by_reference() {
    let mut kv = manager(32, 4, true);
    let a: Vec<u32> = (0..13).collect();
    run_whole(&mut kv, 1, &a);
    let mut b = a[..12].to_vec();
    b.push(99);
    run_whole(&mut kv, 2, &b);
    let ta = kv.block_table(1).unwrap();
    let tb = kv.block_table(2).unwrap();
    assert_eq!(ta[..3], tb[..3]);
    assert_ne!(ta[3], tb[3]);
    assert_eq!(kv.pool().ref_count(ta[0].unwrap()), 2);
    kv.free(1).unwrap();
    kv.free(2).unwrap();
    kv.pool().check_invariants().unwrap();
}

#[test]
fn a_forgotten_document_is_not_reused_and_the_probe_counts_no_statistics() {
    let mut kv = manager(32, 4, true);
    let doc: Vec<u32> = (0..21).collect();
    run_whole(&mut kv, 1, &doc);
    kv.free(1).unwrap();
    let stats_before = kv.prefix_stats();
    assert_eq!(kv.cached_prefix_len(&doc, DENSE), 20);
    assert_eq!(kv.prefix_stats(), stats_before, "probing records nothing");
    // Forgetting the first 10 tokens drops the entries of their two full blocks and of the three
    // blocks computed after them, whose KV depends on them.
    assert_eq!(kv.forget_prefix(&doc[..10], DENSE), 5);
    assert_eq!(
        kv.cached_prefix_len(&doc, DENSE),
        0,
        "the chain breaks at the first block"
    );
    assert_eq!(kv.forget_prefix(&doc, DENSE), 0, "nothing of it is left");
    kv.pool().check_invariants().unwrap();
    // The freed blocks are reused normally.
    run_whole(&mut kv, 2, &doc);
    assert_eq!(kv.prefix_stats().hit_tokens, stats_before.hit_tokens);
    kv.free(2).unwrap();
    kv.pool().check_invariants().unwrap();
}

#[test]
fn without_prefix_caching_nothing_is_reused() {
    let mut kv = manager(32, 4, false);
    let a: Vec<u32> = (0..20).collect();
    run_whole(&mut kv, 1, &a);
    kv.free(1).unwrap();
    assert_eq!(kv.find_cached_prefix(&a, DENSE, true).num_tokens, 0);
}

#[test]
fn a_request_larger_than_the_free_pool_is_refused_without_side_effects() {
    let mut kv = manager(4, 4, true);
    assert!(!kv.allocate(1, 17, None).unwrap());
    assert_eq!(kv.pool().num_free(), 4);
    assert!(kv.block_table(1).is_none());
}

#[test]
fn streaming_fifty_thousand_tokens_through_a_sink_window_keeps_memory_bounded() {
    let (bs, sinks, window) = (16usize, 4usize, 1024usize);
    let mut kv = manager(200, bs, true);
    let scope = windowed(sinks, window);
    let bound = (sinks + window).div_ceil(bs) + 1;
    let tokens: Vec<u32> = (0..50_000u32).map(|i| i % 49_000).collect();
    let mut computed = 0;
    let mut peak = 0;
    while computed < tokens.len() {
        let n = if computed < 2048 { 512 } else { 1 };
        let end = (computed + n).min(tokens.len());
        let admit = (computed == 0).then(|| kv.find_cached_prefix(&tokens, scope, false));
        assert!(
            kv.allocate(1, end, admit.as_ref()).unwrap(),
            "allocation failed at {end}"
        );
        kv.commit_computed(1, &tokens, end).unwrap();
        computed = end;
        peak = peak.max(kv.pool().num_used());
        assert!(
            kv.pool().num_used() <= bound,
            "{} blocks in use at {end}",
            kv.pool().num_used()
        );
    }
    assert!(peak >= bound - 1);
    assert_eq!(
        scope.sink_window.unwrap().visible_tokens(50_000),
        vec![0..4, 48_976..50_000]
    );
    let table = kv.block_table(1).unwrap();
    assert!(table[0].is_some(), "the sink block is kept");
    assert!(
        table[1].is_none(),
        "blocks between sinks and window are freed"
    );
    kv.free(1).unwrap();
    assert_eq!(kv.pool().num_used(), 0);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn a_sink_window_cache_hit_needs_only_the_sink_and_window_blocks() {
    let mut kv = manager(64, 4, true);
    let scope = windowed(4, 8);
    let doc: Vec<u32> = (0..40).collect();
    let mut first = doc.clone();
    first.push(500);
    run_whole_in(&mut kv, 1, &first, scope);
    kv.free(1).unwrap();
    let mut second = doc.clone();
    second.push(600);
    let hit = kv.find_cached_prefix(&second, scope, false);
    assert_eq!(hit.num_tokens, 40);
    assert!(hit.blocks[0].is_some() && hit.blocks[9].is_some() && hit.blocks[3].is_none());
}

#[test]
fn dense_and_windowed_requests_share_only_the_blocks_a_window_has_not_changed() {
    // Sinks 4 + window 8: the first 12 tokens (three blocks of 4) see the same keys either way.
    let mut kv = manager(64, 4, true);
    let scope = windowed(4, 8);
    let doc: Vec<u32> = (0..40).collect();
    run_whole_in(&mut kv, 1, &doc, scope);
    kv.free(1).unwrap();
    assert_eq!(
        kv.cached_prefix_len(&doc, DENSE),
        12,
        "a dense request reuses the blocks before the window first drops a token"
    );
    run_whole(&mut kv, 2, &doc);
    kv.free(2).unwrap();
    assert_eq!(kv.cached_prefix_len(&doc, DENSE), 36);
    assert_eq!(
        kv.cached_prefix_len(&doc, scope),
        36,
        "the windowed copy is still cached beside the dense one"
    );
    assert_eq!(kv.cached_prefix_len(&doc, windowed(4, 12)), 16);
    kv.pool().check_invariants().unwrap();
}

fn windowed_scope() -> CacheScope {
    windowed(4, 16)
}

fn windowed_in(namespace: u64) -> CacheScope {
    CacheScope {
        namespace,
        ..windowed(4, 8)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Start { id: u64, doc: u8, len: usize },
    Grow { id: u64, by: usize },
    Finish { id: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..6, 0u8..3, 1usize..60).prop_map(|(id, doc, len)| Op::Start { id, doc, len }),
        (0u64..6, 1usize..20).prop_map(|(id, by)| Op::Grow { id, by }),
        (0u64..6).prop_map(|id| Op::Finish { id }),
    ]
}

proptest! {
    #[test]
    fn the_pool_stays_consistent_under_random_requests(ops in prop::collection::vec(op(), 1..120),
                                                        windowed in any::<bool>()) {
        // With `windowed`, odd requests stream through a sink window beside dense even ones.
        let scope_of = |id: u64| if windowed && id % 2 == 1 { windowed_scope() } else { DENSE };
        let mut kv = manager(24, 4, true);
        let mut live: std::collections::HashMap<u64, Vec<u32>> = Default::default();
        for op in ops {
            match op {
                Op::Start { id, doc, len } if !live.contains_key(&id) => {
                    let tokens: Vec<u32> = (0..len as u32).map(|i| i * 7 + doc as u32).collect();
                    let prefix = kv.find_cached_prefix(&tokens, scope_of(id), true);
                    if kv.allocate(id, tokens.len(), Some(&prefix)).unwrap() {
                        kv.commit_computed(id, &tokens, tokens.len()).unwrap();
                        live.insert(id, tokens);
                    }
                }
                Op::Grow { id, by } => {
                    if let Some(tokens) = live.get_mut(&id) {
                        let old = tokens.len();
                        let grown: Vec<u32> = tokens.iter().copied().chain((0..by as u32).map(|i| 1000 + i)).collect();
                        if kv.allocate(id, grown.len(), None).unwrap() {
                            kv.commit_computed(id, &grown, grown.len()).unwrap();
                            *tokens = grown;
                        } else {
                            prop_assert_eq!(kv.block_table(id).unwrap().len(), old.div_ceil(4));
                        }
                    }
                }
                Op::Finish { id } => {
                    kv.free(id).unwrap();
                    live.remove(&id);
                }
                Op::Start { .. } => {}
            }
            kv.pool().check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(kv.pool().num_free() + kv.pool().num_used(), kv.pool().num_blocks());
        }
        for id in live.keys().copied().collect::<Vec<_>>() {
            kv.free(id).unwrap();
        }
        prop_assert_eq!(kv.pool().num_used(), 0);
        kv.pool().check_invariants().map_err(TestCaseError::fail)?;
    }
}

#[test]
fn a_prefix_cached_in_one_namespace_is_invisible_to_another() {
    let mut kv = manager(32, 4, true);
    let doc: Vec<u32> = (0..21).collect();
    let (tenant_a, tenant_b) = (7, 8);
    let prefix = kv.find_cached_prefix(&doc, CacheScope::dense(tenant_a), true);
    assert!(kv.allocate(1, doc.len(), Some(&prefix)).unwrap());
    kv.commit_computed(1, &doc, doc.len()).unwrap();
    kv.free(1).unwrap();
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_a)), 20);
    assert_eq!(
        kv.cached_prefix_len(&doc, CacheScope::dense(tenant_b)),
        0,
        "no hit across namespaces"
    );
    assert_eq!(kv.cached_prefix_len(&doc, DENSE), 0);
    // Another namespace computing the same text caches its own copy, and forgetting it leaves A's.
    let prefix = kv.find_cached_prefix(&doc, CacheScope::dense(tenant_b), true);
    assert_eq!(prefix.num_tokens, 0);
    assert!(kv.allocate(2, doc.len(), Some(&prefix)).unwrap());
    kv.commit_computed(2, &doc, doc.len()).unwrap();
    kv.free(2).unwrap();
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_b)), 20);
    assert_eq!(kv.forget_prefix(&doc, CacheScope::dense(tenant_b)), 5);
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_b)), 0);
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_a)), 20);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn forgetting_a_namespace_drops_all_its_prefixes_and_leaves_other_namespaces_theirs() {
    let mut kv = manager(64, 4, true);
    let (tenant_a, tenant_b) = (7, 8);
    let doc: Vec<u32> = (0..21).collect();
    let other: Vec<u32> = (100..113).collect();
    run_whole_in(&mut kv, 1, &doc, CacheScope::dense(tenant_a));
    run_whole_in(&mut kv, 2, &other, CacheScope::dense(tenant_a));
    run_whole_in(&mut kv, 3, &doc, windowed_in(tenant_a));
    run_whole_in(&mut kv, 4, &doc, CacheScope::dense(tenant_b));
    assert_eq!(kv.cached_prefix_len(&doc, windowed_in(tenant_a)), 20);
    // doc's 5 full blocks and other's 3, plus the windowed read's blocks that differ from the dense ones.
    assert!(kv.forget_namespace(tenant_a) > 5 + 3);
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_a)), 0);
    assert_eq!(kv.cached_prefix_len(&other, CacheScope::dense(tenant_a)), 0);
    assert_eq!(kv.cached_prefix_len(&doc, windowed_in(tenant_a)), 0);
    assert_eq!(kv.cached_prefix_len(&doc, CacheScope::dense(tenant_b)), 20);
    assert_eq!(kv.forget_namespace(tenant_a), 0);
    kv.pool().check_invariants().unwrap();
}
