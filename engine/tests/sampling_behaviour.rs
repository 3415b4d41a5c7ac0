//! Sampler behaviour: greedy, top-k, top-p, seeding, agreement with softmax, HF repetition penalty, and
//! stop strings over a text stream.

use docqa_engine::EngineError;
use docqa_engine::sampling::{
    Sampler, SamplingParams, StopStringMatcher, apply_repetition_penalty, stop::safe_prefix_len,
};

fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_k,
        top_p,
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

fn counts(params: &SamplingParams, logits: &[f32], draws: usize) -> Vec<usize> {
    let mut sampler = Sampler::new(params);
    let mut counts = vec![0; logits.len()];
    for _ in 0..draws {
        counts[sampler.sample(&mut logits.to_vec(), &[]) as usize] += 1;
    }
    counts
}

/// Softmax in f64: the independent reference.
fn softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let scaled: Vec<f64> = logits.iter().map(|&l| f64::from(l) / temperature).collect();
    let max = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scaled.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

#[test]
fn temperature_zero_picks_the_argmax() {
    let mut sampler = Sampler::new(&params(0.0, 0, 1.0, 1));
    let logits = [0.1, 3.5, -2.0, 3.4, f32::NAN];
    for _ in 0..10 {
        assert_eq!(sampler.sample(&mut logits.to_vec(), &[]), 1);
    }
}

#[test]
fn top_k_of_one_is_greedy_at_any_temperature() {
    let logits = [0.3, -1.0, 2.9, 2.8, 0.0];
    for seed in 0..20 {
        let mut sampler = Sampler::new(&params(1.5, 1, 1.0, seed));
        assert_eq!(sampler.sample(&mut logits.to_vec(), &[]), 2);
    }
}

#[test]
fn top_k_never_picks_outside_the_k_most_likely() {
    let logits = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
    let c = counts(&params(5.0, 3, 1.0, 7), &logits, 5000);
    assert_eq!(&c[..3], &[0, 0, 0]);
    assert!(c[3..].iter().all(|&n| n > 0));
}

#[test]
fn top_p_keeps_the_smallest_nucleus_reaching_p() {
    // Probabilities 0.5, 0.3, 0.15, 0.05.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let c = counts(&params(1.0, 0, 0.7, 3), &logits, 5000);
    assert!(c[0] > 0 && c[1] > 0 && c[2] == 0 && c[3] == 0, "{c:?}");
    let c = counts(&params(1.0, 0, 0.85, 3), &logits, 5000);
    assert!(c[0] > 0 && c[1] > 0 && c[2] > 0 && c[3] == 0, "{c:?}");
    let c = counts(&params(1.0, 0, 0.4, 3), &logits, 1000);
    assert_eq!(c, vec![1000, 0, 0, 0]);
}

#[test]
fn the_same_seed_repeats_the_same_choices_and_another_seed_does_not() {
    let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
    let run = |seed| {
        let mut s = Sampler::new(&params(1.0, 0, 1.0, seed));
        (0..200)
            .map(|_| s.sample(&mut logits.clone(), &[]))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn sampled_frequencies_follow_softmax_within_five_standard_errors() {
    let logits = [1.0f32, 2.0, 0.5, 3.0, -1.0];
    let temperature = 0.7;
    let draws = 200_000;
    let c = counts(&params(temperature, 0, 1.0, 11), &logits, draws);
    for (i, p) in softmax(&logits, f64::from(temperature))
        .into_iter()
        .enumerate()
    {
        let freq = c[i] as f64 / draws as f64;
        let se = (p * (1.0 - p) / draws as f64).sqrt();
        assert!(
            (freq - p).abs() < 5.0 * se,
            "token {i}: frequency {freq:.5} vs softmax {p:.5}"
        );
    }
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative_logits_once_per_token() {
    let mut logits = [2.0f32, -2.0, 1.0, 0.5];
    apply_repetition_penalty(&mut logits, &[0, 1, 0, 1, 0, 99], 2.0);
    assert_eq!(logits, [1.0, -4.0, 1.0, 0.5]);
}

#[test]
fn repetition_penalty_changes_the_greedy_choice() {
    let mut sampler = Sampler::new(&SamplingParams {
        repetition_penalty: 1.5,
        ..params(0.0, 0, 1.0, 0)
    });
    assert_eq!(sampler.sample(&mut [3.0, 2.5, 0.0], &[0]), 1);
}

#[test]
fn stop_string_split_over_pieces_is_held_back_then_cut() {
    let mut m = StopStringMatcher::new(&["<|stop|>".to_owned()]);
    let a = m.push("Hello <|st");
    assert_eq!((a.emit.as_str(), a.stopped), ("Hello ", false));
    let b = m.push("op|> ignored");
    assert_eq!((b.emit.as_str(), b.stopped), ("", true));
    assert!(m.push("more").stopped);
}

#[test]
fn held_back_text_is_released_when_it_stops_matching_or_the_stream_ends() {
    let mut m = StopStringMatcher::new(&["\n\nUser:".to_owned(), "###".to_owned()]);
    assert_eq!(m.push("a\n\nUs").emit, "a");
    assert_eq!(m.push("ually").emit, "\n\nUsually");
    assert_eq!(m.push(" #").emit, " ");
    assert_eq!(m.finish(), "#");
}

#[test]
fn safe_prefix_never_splits_a_multi_byte_character() {
    let stops = vec!["日本語".to_owned()];
    let text = "私は日本";
    let safe = safe_prefix_len(text, &stops);
    assert!(text.is_char_boundary(safe));
    assert_eq!(&text[..safe], "私は");
}

#[test]
fn out_of_range_parameters_are_refused_and_defaults_are_accepted() {
    assert!(SamplingParams::default().validate().is_ok());
    let cases = [
        SamplingParams {
            temperature: -0.1,
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: f32::NAN,
            ..SamplingParams::default()
        },
        SamplingParams {
            top_p: 0.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            top_p: 1.5,
            ..SamplingParams::default()
        },
        SamplingParams {
            repetition_penalty: 0.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            max_tokens: 0,
            ..SamplingParams::default()
        },
    ];
    for params in cases {
        assert!(
            matches!(params.validate(), Err(EngineError::InvalidSampling(_))),
            "{params:?} accepted"
        );
    }
}

#[test]
fn picks_made_by_a_backend_from_drawn_parameters_repeat_the_samplers_choices() {
    use docqa_engine::backend::Backend;
    use docqa_engine::backend::cpu::CpuBackend;
    let logits: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32 / 17.0).collect();
    let backend = CpuBackend::new();
    for (temperature, top_k, top_p) in [(0.0, 0, 1.0), (0.8, 0, 1.0), (1.3, 20, 0.9), (0.5, 3, 0.4)]
    {
        let p = params(temperature, top_k, top_p, 42);
        let (mut direct, mut drawn) = (Sampler::new(&p), Sampler::new(&p));
        let buf = logits.repeat(2);
        let mut ids = vec![0u32; 2];
        for _ in 0..50 {
            let want = [
                direct.sample(&mut logits.clone(), &[]),
                direct.sample(&mut logits.clone(), &[]),
            ];
            let picks: Vec<f32> = [drawn.next_pick(), drawn.next_pick()]
                .iter()
                .flat_map(|p| p.to_row())
                .collect();
            backend
                .sample_rows(&buf, &picks, (2, logits.len()), &mut ids)
                .unwrap();
            assert_eq!(
                ids, want,
                "temperature {temperature}, top-k {top_k}, top-p {top_p}"
            );
        }
    }
}

#[test]
fn a_repetition_penalty_keeps_picks_on_the_host() {
    let plain = Sampler::new(&params(0.7, 0, 1.0, 1));
    let penalised = Sampler::new(&SamplingParams {
        repetition_penalty: 1.2,
        ..params(0.7, 0, 1.0, 1)
    });
    assert!(plain.picks_from_raw_logits());
    assert!(!penalised.picks_from_raw_logits());
}
