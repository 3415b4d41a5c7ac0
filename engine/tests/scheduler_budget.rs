//! Behaviour of the token-budget scheduler: chunked prefill, continuous batching, prefix hits, preemption,
//! and admission control.

use docqa_engine::EngineError;
use docqa_engine::kv::manager::{KvCacheConfig, KvCacheManager};
use docqa_engine::scheduler::{Scheduler, SchedulerConfig, SchedulerOutput, SeqState};

fn setup(
    num_blocks: usize,
    batched: usize,
    seqs: usize,
    waiting: usize,
) -> (Scheduler, KvCacheManager) {
    let kv = KvCacheManager::new(KvCacheConfig {
        block_size: 4,
        num_blocks,
        enable_prefix_caching: true,
        cache_salt: 0,
    })
    .unwrap();
    let s = Scheduler::new(SchedulerConfig {
        max_num_batched_tokens: batched,
        max_num_seqs: seqs,
        max_waiting: waiting,
    })
    .unwrap();
    (s, kv)
}

/// Run one step as a model would: complete it, then sample token 1 for every request that samples.
fn step(s: &mut Scheduler, kv: &mut KvCacheManager) -> SchedulerOutput {
    let out = s.schedule(kv).unwrap();
    s.complete_step(&out, kv).unwrap();
    for seq in out.seqs.iter().filter(|q| q.samples) {
        s.append_token(seq.id, 1).unwrap();
    }
    kv.pool().check_invariants().unwrap();
    out
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_of_the_token_budget() {
    let (mut s, mut kv) = setup(64, 16, 4, 8);
    s.add(SeqState::new(1, (0..40).collect(), 4), &kv).unwrap();
    let sizes: Vec<_> = (0..4)
        .map(|_| step(&mut s, &mut kv).seqs[0].num_tokens)
        .collect();
    assert_eq!(sizes, vec![16, 16, 8, 1]);
    assert_eq!(s.get(1).unwrap().tokens.len(), 42);
}

#[test]
fn decoding_requests_and_a_new_prefill_share_one_step() {
    let (mut s, mut kv) = setup(64, 10, 4, 8);
    s.add(SeqState::new(1, (0..5).collect(), 8), &kv).unwrap();
    step(&mut s, &mut kv);
    s.add(SeqState::new(2, (100..120).collect(), 8), &kv)
        .unwrap();
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs.len(), 2);
    assert_eq!(
        (out.seqs[0].id, out.seqs[0].num_tokens, out.seqs[0].samples),
        (1, 1, true)
    );
    assert_eq!(
        (out.seqs[1].id, out.seqs[1].num_tokens, out.seqs[1].samples),
        (2, 9, false)
    );
}

#[test]
fn a_cached_document_is_not_computed_again() {
    let (mut s, mut kv) = setup(64, 64, 4, 8);
    let doc: Vec<u32> = (0..30).collect();
    s.add(SeqState::new(1, doc.clone(), 1), &kv).unwrap();
    step(&mut s, &mut kv);
    s.finish(1, &mut kv).unwrap();
    let mut second = doc.clone();
    second.extend([900, 901]);
    s.add(SeqState::new(2, second, 1), &kv).unwrap();
    let out = step(&mut s, &mut kv);
    assert_eq!((out.seqs[0].start, out.seqs[0].num_tokens), (28, 4));
    assert_eq!(s.get(2).unwrap().num_cached_tokens, 28);
}

#[test]
fn when_blocks_run_out_the_newest_request_is_preempted_and_later_recomputed() {
    let (mut s, mut kv) = setup(6, 64, 4, 8);
    s.add(SeqState::new(1, (0..10).collect(), 12), &kv).unwrap();
    s.add(SeqState::new(2, (50..60).collect(), 12), &kv)
        .unwrap();
    let mut preempted = vec![];
    for _ in 0..30 {
        let out = step(&mut s, &mut kv);
        preempted.extend(out.preempted);
        if let Some(q) = s.get(1)
            && q.tokens.len() >= 20
        {
            s.finish(1, &mut kv).unwrap();
        }
    }
    assert_eq!(preempted.first(), Some(&2), "the newer request yields");
    let two = s.get(2).unwrap();
    assert!(two.num_preemptions >= 1);
    assert!(
        two.tokens.len() > 10,
        "request 2 made progress after request 1 finished"
    );
    s.finish(2, &mut kv).unwrap();
    assert_eq!(kv.pool().num_used(), 0);
}

#[test]
fn a_request_that_cannot_fit_even_alone_fails_at_once() {
    let (mut s, kv) = setup(4, 64, 4, 8);
    let err = s
        .add(SeqState::new(1, (0..10).collect(), 10), &kv)
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::RequestTooLarge {
                tokens: 20,
                capacity_tokens: 16
            }
        ),
        "{err}"
    );
}

#[test]
fn a_full_waiting_queue_answers_overloaded() {
    let (mut s, kv) = setup(64, 64, 4, 2);
    s.add(SeqState::new(1, vec![1, 2], 1), &kv).unwrap();
    s.add(SeqState::new(2, vec![1, 2], 1), &kv).unwrap();
    let err = s.add(SeqState::new(3, vec![1, 2], 1), &kv).unwrap_err();
    assert!(
        matches!(err, EngineError::Overloaded { queued: 2 }),
        "{err}"
    );
}

#[test]
fn no_more_than_max_num_seqs_run_at_once() {
    let (mut s, mut kv) = setup(64, 64, 2, 8);
    for id in 0..4 {
        s.add(SeqState::new(id, vec![id as u32; 3], 4), &kv)
            .unwrap();
    }
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs.len(), 2);
    assert_eq!(s.num_waiting(), 2);
}

#[test]
fn finishing_every_request_returns_every_block() {
    let (mut s, mut kv) = setup(32, 16, 4, 8);
    for id in 0..4 {
        s.add(
            SeqState::new(id, (0..(5 + id as u32 * 3)).collect(), 3),
            &kv,
        )
        .unwrap();
    }
    for _ in 0..10 {
        step(&mut s, &mut kv);
    }
    for id in 0..4 {
        s.finish(id, &mut kv).unwrap();
    }
    assert!(!s.has_work());
    assert_eq!(kv.pool().num_used(), 0);
}

mod random_workloads {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_block_comes_back_whatever_the_mix_of_requests_steps_and_cancellations(
            actions in prop::collection::vec((0u8..3, 0u64..8, 1usize..30), 1..80)
        ) {
            let (mut s, mut kv) = setup(16, 12, 3, 4);
            for (kind, id, len) in actions {
                match kind {
                    0 if s.get(id).is_none() => {
                        let prompt: Vec<u32> = (0..len as u32).map(|t| t % 5).collect();
                        let _ = s.add(SeqState::new(id, prompt, 6), &kv);
                    }
                    1 => {
                        let out = step(&mut s, &mut kv);
                        prop_assert!(out.num_tokens() <= 12);
                        prop_assert!(out.seqs.len() <= 3);
                        for q in out.seqs.iter().filter(|q| q.samples) {
                            let seq = s.get(q.id).unwrap();
                            if seq.tokens.len() - seq.num_prompt_tokens >= seq.max_new_tokens {
                                s.finish(q.id, &mut kv).unwrap();
                            }
                        }
                    }
                    _ => {
                        s.finish(id, &mut kv).unwrap();
                    }
                }
                kv.pool().check_invariants().map_err(TestCaseError::fail)?;
            }
            for id in 0..8 {
                s.finish(id, &mut kv).unwrap();
            }
            prop_assert_eq!(kv.pool().num_used(), 0);
            prop_assert!(!s.has_work());
        }
    }
}
