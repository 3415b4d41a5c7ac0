//! Running an evaluation: each sampled question of each dataset is asked on each route through a
//! docqa server, scored, and appended to `results.jsonl` at once; documents are ingested once and their
//! ids kept in `documents.json`, so an interrupted run resumes where it stopped. A document's questions
//! run route by route, each route starting from a cold KV cache (the tenant's cache is dropped first).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use super::client::DocqaClient;
use super::dataset::{self, EvalDocument};
use super::results::{self, QuestionResult};

/// What to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Dataset files.
    pub datasets: Vec<PathBuf>,
    /// Routes, in the order each document's questions are asked on them.
    pub routes: Vec<String>,
    /// Output directory.
    pub out: PathBuf,
    /// Questions per dataset (seeded sample), or all.
    pub limit: Option<usize>,
    /// Sample seed.
    pub seed: u64,
    /// Answer tokens.
    pub max_tokens: usize,
    /// Questions in flight at once.
    pub concurrency: usize,
}

/// Chunks retrieved to measure evidence recall.
const EVIDENCE_K: usize = 10;

/// Runs every question not already in `results.jsonl`; returns all results (old and new).
pub fn run(client: &DocqaClient, s: &Settings) -> anyhow::Result<Vec<QuestionResult>> {
    std::fs::create_dir_all(&s.out)?;
    let results_path = s.out.join("results.jsonl");
    let previous = results::read_for_resume(&results_path)?;
    let adapter = client.adapter_label()?;
    same_adapter(&previous, adapter.as_deref())?;
    let done: HashSet<String> = previous.iter().map(QuestionResult::key).collect();
    let ids_path = s.out.join("documents.json");
    let mut ids: HashMap<String, String> = std::fs::read_to_string(&ids_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let mut plans = Vec::new();
    for path in &s.datasets {
        let set = dataset::load(path)?;
        let picked = dataset::sample(&set.documents, s.limit, s.seed);
        plans.push((stem(path), set, picked));
    }
    let todo: usize = plans
        .iter()
        .flat_map(|(_, set, picked)| {
            picked
                .iter()
                .map(move |(d, q)| &set.documents[*d].questions[*q])
        })
        .map(|q| {
            s.routes
                .iter()
                .filter(|r| !done.contains(&results::key(&q.id, r)))
                .count()
        })
        .sum();
    let bar = progress(todo as u64);
    let sink = Mutex::new(previous);
    for (name, set, picked) in &plans {
        let docs = &set.documents;
        let mut by_doc: Vec<(usize, Vec<usize>)> = Vec::new();
        for &(d, q) in picked {
            match by_doc.last_mut() {
                Some((last, qs)) if *last == d => qs.push(q),
                _ => by_doc.push((d, vec![q])),
            }
        }
        for (d, questions) in by_doc {
            let doc = &docs[d];
            let pending: Vec<usize> = questions
                .into_iter()
                .filter(|&q| {
                    s.routes
                        .iter()
                        .any(|r| !done.contains(&results::key(&doc.questions[q].id, r)))
                })
                .collect();
            if pending.is_empty() {
                continue;
            }
            bar.set_message(format!("{name}: {}", doc.id));
            let file = set.files.get(&doc.id).map(PathBuf::as_path);
            let docqa_id = ensure_ingested(client, doc, file, &mut ids, &ids_path)?;
            let tokens = document_tokens(client, &docqa_id);
            let ctx = DocContext {
                client,
                s,
                name,
                doc,
                docqa_id: &docqa_id,
                tokens,
                done: &done,
                adapter: adapter.as_deref(),
            };
            run_questions(&ctx, &pending, &results_path, &sink, &bar)?;
        }
    }
    bar.finish_and_clear();
    Ok(sink.into_inner().unwrap_or_else(|e| e.into_inner()))
}

struct DocContext<'a> {
    client: &'a DocqaClient,
    s: &'a Settings,
    name: &'a str,
    doc: &'a EvalDocument,
    docqa_id: &'a str,
    tokens: u64,
    done: &'a HashSet<String>,
    /// The server's adapter label, recorded on every result.
    adapter: Option<&'a str>,
}

/// Asks the document's pending questions route by route. Before each route the tenant's cached KV is
/// dropped (the document's and the RAG prompts'), so every route is timed as if it served the document
/// alone: its first question from a cold cache, the later ones from what that route itself cached.
fn run_questions(
    ctx: &DocContext<'_>,
    pending: &[usize],
    results_path: &Path,
    sink: &Mutex<Vec<QuestionResult>>,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let evidence: HashMap<usize, Option<f64>> =
        pending.iter().map(|&q| (q, evidence_of(ctx, q))).collect();
    for route in &ctx.s.routes {
        let todo: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&q| {
                !ctx.done
                    .contains(&results::key(&ctx.doc.questions[q].id, route))
            })
            .collect();
        if todo.is_empty() {
            continue;
        }
        if let Err(e) = ctx.client.drop_kv_cache(ctx.docqa_id) {
            bar.println(format!(
                "warning: could not drop the cached KV before route {route} on {}: {e:#}",
                ctx.doc.id
            ));
        }
        let ask = |q: usize| ask_route(ctx, q, route, evidence[&q]);
        run_in_parallel(ctx.s.concurrency, &todo, ask, results_path, sink, bar)?;
    }
    Ok(())
}

/// Runs `ask` on every question of `todo`, `concurrency` at a time, appending each result as it comes.
fn run_in_parallel(
    concurrency: usize,
    todo: &[usize],
    ask: impl Fn(usize) -> QuestionResult + Sync,
    results_path: &Path,
    sink: &Mutex<Vec<QuestionResult>>,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..concurrency.max(1) {
            scope.spawn(|| {
                while let Some(&q) = todo.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let r = ask(q);
                    if let Err(e) = results::append(results_path, &r) {
                        *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        return;
                    }
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    bar.inc(1);
                }
            });
        }
    });
    match failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e.context("writing results")),
        None => Ok(()),
    }
}

/// Evidence recall@10 of retrieval for question `q`, where the dataset gives evidence.
fn evidence_of(ctx: &DocContext<'_>, q: usize) -> Option<f64> {
    let question = &ctx.doc.questions[q];
    if question.evidence.is_empty() {
        return None;
    }
    ctx.client
        .search(ctx.docqa_id, &question.question, EVIDENCE_K)
        .ok()
        .and_then(|chunks| results::evidence_recall(&question.evidence, &chunks))
}

/// Refuses to resume results answered with another adapter than the server's (a run compares one
/// setup; a base run and a reader run belong in two directories).
fn same_adapter(previous: &[QuestionResult], now: Option<&str>) -> anyhow::Result<()> {
    let before = previous.iter().find_map(|r| r.adapter.as_deref());
    match (before, now) {
        (Some(b), Some(n)) if b != n => anyhow::bail!(
            "results.jsonl was answered with adapter {b}, the server merges {n}: use another --out"
        ),
        _ => Ok(()),
    }
}

/// Asks question `q` on `route` and scores the answer (an error scores 0; a resumed run asks again).
fn ask_route(ctx: &DocContext<'_>, q: usize, route: &str, evidence: Option<f64>) -> QuestionResult {
    let question = &ctx.doc.questions[q];
    let answer = ctx
        .client
        .ask(ctx.docqa_id, &question.question, route, ctx.s.max_tokens);
    let scored = |a: &serde_json::Value| {
        results::score(ctx.name, ctx.doc, ctx.tokens, question, route, a, evidence)
    };
    let mut r = match answer {
        Ok(a) => scored(&a),
        Err(e) => {
            let mut r = scored(&serde_json::Value::Null);
            r.score = 0.0;
            r.error = Some(e.to_string());
            r
        }
    };
    r.adapter = ctx.adapter.map(str::to_owned);
    r
}

/// The document's id on the server, ingesting it first (its original file when the dataset has one, else
/// its text) unless an earlier run did.
fn ensure_ingested(
    client: &DocqaClient,
    doc: &EvalDocument,
    original: Option<&Path>,
    ids: &mut HashMap<String, String>,
    ids_path: &Path,
) -> anyhow::Result<String> {
    if let Some(id) = ids.get(&doc.id)
        && client.has_document(id)
    {
        return Ok(id.clone());
    }
    let file = format!(
        "{}.txt",
        if doc.title.is_empty() {
            &doc.id
        } else {
            &doc.title
        }
    );
    let id = match original {
        Some(path) => client.ingest_file(path),
        None => client.ingest(&file, &doc.text),
    }
    .with_context(|| format!("ingesting {}", doc.id))?;
    ids.insert(doc.id.clone(), id.clone());
    std::fs::write(ids_path, serde_json::to_string_pretty(ids)?)?;
    Ok(id)
}

fn document_tokens(client: &DocqaClient, id: &str) -> u64 {
    client
        .document(id)
        .ok()
        .and_then(|d| d["token_count"].as_u64())
        .unwrap_or(0)
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{msg:<40} [{bar:30}] {pos}/{len} answers, ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}
