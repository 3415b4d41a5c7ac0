//! `docqa eval`: runs QA datasets through the routes and writes `results.jsonl`, `report.json`,
//! `report.md` and the plots (SVG and PNG) to the output directory. In-process by default (a server on
//! a free loopback port, its data under `OUT/server`, kept so a resumed run reuses the ingested
//! documents), or against a running server with `--url` and `--api-key`. `--report-only` writes the
//! reports from an existing `results.jsonl`; `--compare BASE NEW` puts two earlier runs side by side.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser};

use crate::config::ServeConfig;
use crate::eval::client::DocqaClient;
use crate::eval::results::QuestionResult;
use crate::eval::{compare, plots, report, routes_compared, runner};

/// `docqa eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Dataset files in docqa's JSON Lines format (repeat the flag, or separate with commas).
    #[arg(long, required_unless_present_any = ["compare", "report_only"], value_delimiter = ',')]
    dataset: Vec<PathBuf>,
    /// Compare two earlier runs instead (their directories or `report.json` files): prints the
    /// comparison, and writes it to `OUT/compare.md` when `--out` is given.
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with = "dataset")]
    compare: Option<Vec<PathBuf>>,
    /// Write `report.json`, `report.md` and the plots from `OUT/results.jsonl` as it stands, asking
    /// nothing (results brought from another machine, or re-rendered after a change to the reports).
    #[arg(long, conflicts_with_all = ["compare", "url"])]
    report_only: bool,
    /// Routes to ask each question on, in this order.
    #[arg(long, default_value = "rag,long,auto", value_delimiter = ',')]
    routes: Vec<String>,
    /// Output directory (results, reports; a second run with the same directory resumes).
    #[arg(long, required_unless_present = "compare")]
    out: Option<PathBuf>,
    /// Questions per dataset: a seeded sample.
    #[arg(long)]
    limit: Option<usize>,
    /// Seed of the sample.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Answer tokens per question (greedy decoding).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Questions in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// A running docqa server to evaluate instead of an in-process one.
    #[arg(long, env = "DOCQA_EVAL_URL")]
    url: Option<String>,
    /// API key for `--url`.
    #[arg(long, env = "DOCQA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// RAG window of the in-process server, in tokens [default: the server's for its device].
    #[arg(long)]
    rag_window: Option<usize>,
    /// Abstention threshold of the in-process server (`docqa serve --abstention-threshold`; 0 never
    /// abstains) [default: the server's].
    #[arg(long)]
    abstention_threshold: Option<f64>,
    /// Directory holding the model directories (in-process server).
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// LoRA adapter of the in-process server (`docqa serve --adapter`): a PEFT adapter directory, or
    /// `none` for the base model [default: the shipped reader]. Each result records the adapter used.
    #[arg(long, env = "DOCQA_ADAPTER", value_name = "DIR|none")]
    adapter: Option<crate::adapter::AdapterFlag>,
    /// Split the in-process server's generator over this many ranks (`docqa serve
    /// --tensor-parallel`).
    #[arg(long, value_name = "N")]
    tensor_parallel: Option<usize>,
}

#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeConfig,
}

/// Runs `docqa eval`.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    if let Some(pair) = &args.compare {
        return compare(&pair[0], &pair[1], args.out.as_deref());
    }
    let out = args.out.clone().context("--out is required")?;
    for r in &args.routes {
        anyhow::ensure!(
            ["rag", "long", "auto"].contains(&r.as_str()),
            "unknown route {r:?}: use rag, long or auto"
        );
    }
    let (results, header) = if args.report_only {
        let path = out.join("results.jsonl");
        let results = crate::eval::results::read(&path)?;
        anyhow::ensure!(!results.is_empty(), "{} holds no results", path.display());
        let header = format!(
            "{} answers read from {} (report written without asking); adapter {}.",
            results.len(),
            path.display(),
            crate::eval::results::adapters(&results)
        );
        (results, header)
    } else {
        let results = run_questions(&args, &out)?;
        let header = run_header(&args, &results);
        (results, header)
    };
    let summaries = report::summarize(&results);
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(
            &serde_json::json!({ "summaries": summaries, "results": results }),
        )?,
    )?;
    let mut md = report::markdown(&summaries, &header);
    md.push_str(&routes_compared::markdown(&summaries));
    md.push_str(&routes_compared::cached_documents_markdown(&results));
    md.push_str(&plots_section(&summaries, &results, &out));
    std::fs::write(out.join("report.md"), &md)?;
    println!("{md}");
    Ok(())
}

/// Asks every pending question through the in-process server or `--url`; returns all results.
fn run_questions(args: &EvalArgs, out: &Path) -> anyhow::Result<Vec<QuestionResult>> {
    let client = match &args.url {
        Some(url) => DocqaClient::new(url, args.api_key.clone())?,
        None => DocqaClient::new(&start_in_process(args)?, None)?,
    };
    let settings = runner::Settings {
        datasets: args.dataset.clone(),
        routes: args.routes.clone(),
        out: out.to_path_buf(),
        limit: args.limit,
        seed: args.seed,
        max_tokens: args.max_tokens,
        concurrency: args.concurrency,
    };
    runner::run(&client, &settings)
}

/// The report's first line: what was run, and where.
fn run_header(args: &EvalArgs, results: &[QuestionResult]) -> String {
    format!(
        "{} answers; adapter {}; routes {}; limit {:?} per dataset, seed {}; max answer tokens {}; {}.",
        results.len(),
        crate::eval::results::adapters(results),
        args.routes.join(", "),
        args.limit,
        args.seed,
        args.max_tokens,
        match &args.url {
            Some(u) => format!("server {u}"),
            None => format!(
                "in-process server, RAG window {}{}",
                args.rag_window.map_or_else(
                    || format!("{} (the device's default)", default_rag_window()),
                    |w| w.to_string()
                ),
                args.abstention_threshold
                    .map(|t| format!(", abstention threshold {t}"))
                    .unwrap_or_default()
            ),
        }
    )
}

/// Renders the plots into `out`; the report's section listing them (or saying why there are none).
fn plots_section(
    summaries: &[report::RouteSummary],
    results: &[QuestionResult],
    out: &Path,
) -> String {
    match plots::render(summaries, results, out) {
        Ok(files) => {
            let svgs: Vec<String> = files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "svg"))
                .filter_map(|f| f.file_name())
                .map(|n| format!("![{0}]({0})", n.to_string_lossy()))
                .collect();
            format!(
                "\n## Plots\n\n{}\n\nEach plot is also written as PNG beside its SVG.\n",
                svgs.join("\n")
            )
        }
        Err(why) => format!("\n## Plots\n\nNot drawn: {why}.\n"),
    }
}

/// Prints (and with `out`, writes) the comparison of two runs.
fn compare(base: &Path, new: &Path, out: Option<&Path>) -> anyhow::Result<()> {
    let md = compare::markdown(
        &compare::load(base)?,
        &compare::load(new)?,
        &base.display().to_string(),
        &new.display().to_string(),
    );
    if let Some(dir) = out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("compare.md"), &md)?;
    }
    println!("{md}");
    Ok(())
}

/// Starts `docqa serve` in this process on a free loopback port; returns its base URL.
fn start_in_process(args: &EvalArgs) -> anyhow::Result<String> {
    let data = args
        .out
        .as_deref()
        .context("--out is required")?
        .join("server");
    let mut argv: Vec<String> = vec![
        "serve".into(),
        "--bind".into(),
        "127.0.0.1:0".into(),
        "--local-mode".into(),
        "on".into(),
        "--rate-limit-per-minute".into(),
        "0".into(),
        "--max-waiting".into(),
        "1024".into(),
        "--max-answer-tokens".into(),
        args.max_tokens.max(1).to_string(),
        "--data-dir".into(),
        data.display().to_string(),
    ];
    if let Some(t) = args.abstention_threshold {
        argv.push("--abstention-threshold".into());
        argv.push(t.to_string());
    }
    if let Some(dir) = &args.models_dir {
        argv.push("--models-dir".into());
        argv.push(dir.display().to_string());
    }
    if let Some(adapter) = &args.adapter {
        argv.push("--adapter".into());
        argv.push(adapter.to_string());
    }
    if let Some(window) = args.rag_window {
        argv.push("--rag-window".into());
        argv.push(window.to_string());
    }
    if let Some(ranks) = args.tensor_parallel {
        argv.push("--tensor-parallel".into());
        argv.push(ranks.to_string());
    }
    let config = ServeOnly::try_parse_from(argv)?.serve;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("docqa-eval-server".into())
        .spawn(move || {
            let result =
                actix_web::rt::System::new().block_on(crate::server::run_with(config, |addrs| {
                    let _ = tx.send(addrs.first().copied());
                }));
            if let Err(e) = result {
                eprintln!("docqa eval: the in-process server stopped: {e:#}");
            }
        })?;
    let addr = rx
        .recv_timeout(Duration::from_secs(600))
        .context("the in-process server did not start")?
        .context("the in-process server has no address")?;
    Ok(format!("http://{addr}"))
}

/// The RAG window the in-process server uses when none is given: its device's default
/// (`DOCQA_DEVICE`, else the CPU).
fn default_rag_window() -> usize {
    ServeOnly::try_parse_from(["serve"])
        .map(|s| s.serve.rag_window())
        .unwrap_or_else(|_| crate::device::Device::Cpu.defaults().rag_window)
}
