//! `docqa generate` as benchmarks run it: a warm-up pass before the timed requests, which reads a
//! prompt of the same length without serving the timed ones from the prefix cache and prints nothing
//! to stdout.

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
