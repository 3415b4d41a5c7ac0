//! `docqa generate` as benchmarks run it: a warm-up before the timed requests (the engine's own, then a
//! prompt of the first one's length), which serves none of them from the prefix cache and prints
//! nothing to stdout, then a calibration whose steps the reading estimates start from; several prompts
//! asked in turn, each report with the engine's reading estimate; a GGUF file as the model, converted
//! on the first run.

use std::process::Command;

use crate::support;

/// The numbers in a `[N prompt tokens (M from the prefix cache), ...]` report line.
fn prompt_and_cached(line: &str) -> (usize, usize) {
    let numbers: Vec<usize> = line
        .trim_start_matches('[')
        .split([' ', '('])
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// The first answer's report line in `docqa generate`'s stderr.
fn first_report(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("from the prefix cache"))
        .unwrap_or_else(|| panic!("no report in {stderr}"))
}

#[test]
fn a_warm_up_reads_the_prompt_length_once_and_leaves_the_timed_answers_alone() {
    let run = |extra: &[&str]| {
        let out = support::succeed(
            Command::new(env!("CARGO_BIN_EXE_docqa"))
                .args([
                    "generate",
                    "--device",
                    "cpu",
                    "--max-tokens",
                    "6",
                    "--repeat",
                    "2",
                ])
                .args(["--prompt", "Name the largest planet of the solar system."])
                .args(extra),
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (plain_out, _) = run(&[]);
    let (warm_out, warm_err) = run(&["--warm-up"]);

    assert_eq!(warm_out, plain_out, "the warm-up adds nothing to stdout");
    assert_eq!(warm_out.lines().count(), 2, "{warm_out}");
    let warm_up = warm_err
        .lines()
        .find(|l| l.starts_with("[warm-up: "))
        .unwrap_or_else(|| panic!("no warm-up line in {warm_err}"));
    let timed: Vec<(usize, usize)> = warm_err
        .lines()
        .filter(|l| l.contains("from the prefix cache"))
        .map(prompt_and_cached)
        .collect();
    assert_eq!(timed.len(), 2, "{warm_err}");
    let warm_tokens: usize = warm_up["[warm-up: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(warm_tokens, timed[0].0, "the warm-up reads as many tokens");
    assert_eq!(
        timed[0].1, 0,
        "the first timed request reads its whole prompt"
    );
    assert!(timed[1].1 > 0, "the second comes from the prefix cache");
}

#[test]
fn several_prompt_files_are_asked_in_turn_each_report_with_a_reading_estimate_from_the_calibration()
{
    let dir = tempfile::tempdir().unwrap();
    // Three prompts of distinct lengths and first words (so no prefix is cached between them), raw.
    let lengths = [1100, 30, 300];
    let files: Vec<String> = lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let path = dir.path().join(format!("prompt-{i}.txt"));
            let words = ["alpha", "bravo", "charlie"][i];
            std::fs::write(&path, vec![words; n].join(" ")).unwrap();
            path.display().to_string()
        })
        .collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_docqa"));
    // The warm-up reads the engine's own prompts and the first prompt reversed (1,100 tokens), and
    // counts none of them; the calibration after it counts its own.
    cmd.args([
        "generate",
        "--device",
        "cpu",
        "--raw",
        "--max-tokens",
        "1",
        "--warm-up",
    ]);
    for f in &files {
        cmd.args(["--prompt-file", f]);
    }
    let out = support::succeed(&mut cmd);
    let err = String::from_utf8(out.stderr).unwrap();
    let reports: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("from the prefix cache"))
        .collect();
    assert_eq!(reports.len(), 3, "{err}");
    assert!(err.contains("[warm-up: "), "{err}");
    let tokens: Vec<usize> = reports.iter().map(|l| prompt_and_cached(l).0).collect();
    assert!(
        tokens[0] > tokens[2] && tokens[2] > tokens[1],
        "asked in the order given: {tokens:?}"
    );
    // The calibration after the warm-up read eight steps of 256 and prompts of 128, 32 and 8 tokens,
    // and kept their measure: every report has an estimate, the first one too.
    assert!(
        err.contains("which the calibration's 2216 prompt tokens (0 through the window) read in"),
        "{err}"
    );
    for r in &reports {
        let estimate = r
            .rsplit("reading estimated: ")
            .next()
            .and_then(|e| e.strip_suffix(" s]"))
            .and_then(|e| e.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no estimate in {r}"));
        assert!(estimate > 0.0, "{r}");
    }
}

#[test]
fn without_a_warm_up_the_first_report_has_no_reading_estimate() {
    let out = support::succeed(
        Command::new(env!("CARGO_BIN_EXE_docqa"))
            .args(["generate", "--device", "cpu", "--raw", "--max-tokens", "1"])
            .args(["--prompt", "alpha bravo charlie"]),
    );
    let err = String::from_utf8(out.stderr).unwrap();
    let report = first_report(&err);
    assert!(report.ends_with("reading estimated: none yet]"), "{report}");
}

fn generate(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_docqa"))
        .args(["generate", "--device", "cpu", "--max-tokens", "8"])
        .args(["--prompt", "Name the largest planet of the solar system."])
        .args(extra)
        .output()
        .expect("docqa runs")
}

#[test]
fn a_generator_split_over_three_ranks_answers_and_says_so() {
    let out = generate(&["--tensor-parallel", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("generator on the CPU (3 tensor-parallel ranks, one thread each)"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn a_split_the_model_cannot_take_is_refused_with_the_reason() {
    // SmolLM2-135M has 9 attention heads and 3 KV heads.
    let out = generate(&["--tensor-parallel", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("attention heads (9) to be a multiple of 2"),
        "{stderr}"
    );
    let none = generate(&["--tensor-parallel", "0"]);
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(!none.status.success());
    assert!(
        stderr.contains("--tensor-parallel must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn a_prompt_longer_than_the_context_is_read_through_a_sink_window_and_refused_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.txt");
    // Over SmolLM2's 8,192-token context, raw.
    std::fs::write(&path, vec!["alpha"; 8400].join(" ")).unwrap();
    let path = path.display().to_string();
    let base = [
        "generate",
        "--device",
        "cpu",
        "--raw",
        "--max-tokens",
        "1",
        "--prompt-file",
        &path,
    ];
    let refused = Command::new(env!("CARGO_BIN_EXE_docqa"))
        .args(base)
        .output()
        .expect("docqa runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("8192"), "{stderr}");

    let out = support::succeed(
        Command::new(env!("CARGO_BIN_EXE_docqa"))
            .args(base)
            .args(["--sink-window", "1024"]),
    );
    let err = String::from_utf8(out.stderr).unwrap();
    let report = first_report(&err);
    let (tokens, cached) = prompt_and_cached(report);
    assert!(tokens > 8192 && cached == 0, "{report}");
}

#[test]
fn a_gguf_file_named_as_the_model_is_converted_on_the_first_run_and_read_from_there_after() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny-llama.gguf");
    // A one-layer random Llama with a SentencePiece vocabulary (tests/reference/sentencepiece_gguf.py).
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/golden/sentencepiece_gguf/spm.gguf"
        ),
        &gguf,
    )
    .unwrap();
    let models = dir.path().join("models");
    let run = || {
        let out = support::succeed(
            Command::new(env!("CARGO_BIN_EXE_docqa"))
                .args(["generate", "--device", "cpu", "--adapter", "none", "--raw"])
                .args(["--max-tokens", "4", "--temperature", "0"])
                .args(["--prompt", "The lease ends in June."])
                .arg("--models-dir")
                .arg(&models)
                .arg("--model")
                .arg(&gguf),
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (first_out, first_err) = run();
    assert!(first_err.contains("(GGUF) into"), "{first_err}");
    let keys: Vec<_> = std::fs::read_dir(models.join("converted"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].join("tiny-llama/config.json").is_file(), "{keys:?}");
    let (second_out, second_err) = run();
    assert!(!second_err.contains("converting"), "{second_err}");
    assert_eq!(second_out, first_out, "the same model answers the same");
    assert!(
        first_report(&second_err).contains("4 generated"),
        "{second_err}"
    );
}
