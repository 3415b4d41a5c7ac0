//! Three replicas on one PostgreSQL database, each with its own indexes, some behind HAProxy running the
//! shipped `deploy/haproxy.cfg`: a document ingested through one replica becomes searchable through every
//! replica within the follower's bound and its deletion is seen everywhere; a replica stopped while
//! changes are made catches up when it starts again; the questions about one document, sent with its
//! affinity key, all reach one replica, whose prefix cache alone is hit; a replica killed mid-ingestion
//! has its job finished by another (the replicas share one originals folder), once, with the chunks of an
//! uninterrupted ingestion; a key's rate limit is counted by each replica.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cluster::{Balancer, Cluster, haproxy};
use support::{Database, Options, Server};

/// How often the test replicas read the index change log.
const POLL_MS: u64 = 200;

/// How long after its job succeeded a document may take to be searchable on every replica (the poll
/// interval, the change's application, and room for a busy two-core machine).
const BOUND: Duration = Duration::from_secs(3);

fn options() -> Options {
    Options::new(Database::Postgres).arg("--index-poll-ms", POLL_MS)
}

/// A short document whose one rare word, `marker`, finds it; every marker of the same length gives a
/// document of the same length (so the same number of chunks).
fn document(marker: &str) -> Vec<u8> {
    format!(
        "The harbour ledger of {marker}. The harbour master kept the ledger of {marker} in a locked \
         drawer. Every ship that docked paid its dues in silver, and the dues were written down on the \
         day they were paid. In the winter the harbour froze and no ship docked for three months; the \
         ledger of {marker} has no entries for those months. The master's daughter later copied the \
         ledger into a second book, which is kept in the town library."
    )
    .into_bytes()
}

/// Ingests `bytes` through `server`; returns the document once its job succeeded.
fn ingest(server: &Server, key: &str, name: &str, bytes: Vec<u8>) -> Value {
    let (id, job) = server.ingest(key, name, bytes, "text/plain");
    assert_eq!(job["status"], "succeeded", "{job}");
    server
        .get(&format!("/v1/documents/{id}"), key)
        .json()
        .unwrap()
}

/// Whether a BM25 search for `word` through `server` finds a chunk of `document` (its index has it).
fn finds(server: &Server, key: &str, word: &str, document: &str) -> bool {
    let body = json!({ "query": word, "k": 10, "mode": "bm25" });
    let res = server.post("/v1/search", key, &body);
    let status = res.status();
    let v: Value = res.json().unwrap();
    assert!(
        status.is_success(),
        "search on {}: {status} {v}",
        server.base
    );
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["document_id"] == document)
}

/// (chunks of ready documents in the database, in the BM25 index, in the dense index) on `server`.
fn counts(server: &Server, key: &str) -> (i64, i64, i64) {
    let v: Value = server.get("/v1/stats", key).json().unwrap();
    let n = |field: &str| v[field].as_i64().unwrap_or(-1);
    (n("database_chunks"), n("bm25_chunks"), n("dense_chunks"))
}

/// Polls `done` until it holds; returns how long that took, or fails once `bound` has passed.
fn within(bound: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if done() {
            return started.elapsed();
        }
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Opens the tenant's index on every replica (an index opened later would be rebuilt from the database
/// and hide what the follower does).
fn open_every_index(cluster: &Cluster, key: &str) {
    for r in &cluster.replicas {
        assert_eq!(counts(r, key), (0, 0, 0));
    }
}

#[test]
fn a_document_ingested_on_one_replica_is_searchable_on_every_replica_and_its_deletion_seen_everywhere()
 {
    let test = "replicas::convergence";
    let Some(cluster) = Cluster::start(test, 3, &options()) else {
        return;
    };
    let [a, b, c] = &cluster.replicas[..] else {
        unreachable!()
    };
    let (_, key) = a.tenant("replicas");
    open_every_index(&cluster, &key);

    let doc = ingest(a, &key, "ledger.txt", document("quillmarsh"));
    let id = doc["id"].as_str().unwrap();
    let chunks = doc["chunk_count"].as_i64().unwrap();
    assert!(
        finds(a, &key, "quillmarsh", id),
        "the ingesting replica at once"
    );
    for (name, r) in [("b", b), ("c", c)] {
        let took = within(BOUND, &format!("replica {name} finds it"), || {
            finds(r, &key, "quillmarsh", id)
        });
        eprintln!("replica {name} found the new document {took:?} after its job ended");
        assert_eq!(counts(r, &key), (chunks, chunks, chunks), "replica {name}");
    }

    assert_eq!(b.delete(&format!("/v1/documents/{id}"), &key).status(), 204);
    for (name, r) in [("a", a), ("b", b), ("c", c)] {
        let took = within(BOUND, &format!("replica {name} drops it"), || {
            counts(r, &key) == (0, 0, 0)
        });
        eprintln!("replica {name} dropped the deleted document in {took:?}");
    }
}

#[test]
fn a_replica_stopped_while_documents_change_catches_up_when_it_starts_again() {
    let test = "replicas::catch_up";
    let Some(mut cluster) = Cluster::start(test, 3, &options()) else {
        return;
    };
    let (_, key) = cluster.replicas[0].tenant("replicas");
    open_every_index(&cluster, &key);
    let old = ingest(&cluster.replicas[0], &key, "old.txt", document("oldmarker"));
    let old_id = old["id"].as_str().unwrap();
    let chunks = old["chunk_count"].as_i64().unwrap();
    within(BOUND, "replica c finds the old document", || {
        finds(&cluster.replicas[2], &key, "oldmarker", old_id)
    });

    assert!(cluster.replicas[2].terminate(), "replica c stops cleanly");
    let a = &cluster.replicas[0];
    assert_eq!(
        a.delete(&format!("/v1/documents/{old_id}"), &key).status(),
        204
    );
    let new = ingest(a, &key, "new.txt", document("newmarker"));
    let new_id = new["id"].as_str().unwrap().to_string();
    // The same number of chunks: the index's size agrees with the database, so opening it on restart
    // rebuilds nothing, and only the follower can bring the change.
    assert_eq!(new["chunk_count"].as_i64().unwrap(), chunks);

    let c = &mut cluster.replicas[2];
    c.restart();
    let took = within(
        BOUND,
        "the restarted replica finds the new document",
        || finds(c, &key, "newmarker", &new_id),
    );
    eprintln!("the restarted replica caught up {took:?} after it listened");
    assert_eq!(
        counts(c, &key),
        (chunks, chunks, chunks),
        "the old one is gone"
    );
    assert!(
        !c.log_text()
            .contains("index disagrees with the database; rebuilding"),
        "caught up by a rebuild, not by the change log:\n{}",
        c.log_text()
    );
}

/// Sum of the samples of metric `name` in a Prometheus text whose labels contain `labels`.
fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter(|l| l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Per replica: (answers given, prompt tokens found in its prefix cache, searches answered).
fn tallies(cluster: &Cluster) -> Vec<(f64, f64, f64)> {
    cluster
        .replicas
        .iter()
        .map(|r| {
            let text = r
                .http
                .get(r.url("/metrics"))
                .send()
                .unwrap()
                .text()
                .unwrap();
            (
                metric(&text, "docqa_answers_total", ""),
                metric(&text, "docqa_engine_prefix_cache_hit_tokens", ""),
                metric(&text, "docqa_http_requests_total", "route=\"/v1/search\""),
            )
        })
        .collect()
}

#[test]
fn questions_about_one_document_with_its_affinity_key_all_reach_one_replica_through_haproxy() {
    let test = "replicas::affinity";
    let Some(executable) = haproxy(test) else {
        return;
    };
    let Some(cluster) = Cluster::start(test, 3, &options()) else {
        return;
    };
    let lb = Balancer::start(&executable, &cluster.replicas);
    let (_, key) = cluster.replicas[0].tenant("replicas");
    let doc = ingest(
        &cluster.replicas[1],
        &key,
        "ledger.txt",
        document("affinity"),
    );
    let id = doc["id"].as_str().unwrap();
    let before = tallies(&cluster);
    let questions = [
        "Where was the ledger kept?",
        "What did ships pay their dues in?",
        "Why are there no entries for the winter months?",
    ];
    let mut answers = Vec::new();
    for q in questions {
        let body = json!({
            "question": q, "route": "long", "max_tokens": 8,
            "scope": { "document_ids": [id] },
        });
        let res = lb
            .req(reqwest::Method::POST, "/v1/ask", &key)
            .header("X-Docqa-Affinity", id)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(res.status(), 200, "{}", lb.log_text());
        let answer: Value = res.json().unwrap();
        answers.push(answer["answer_id"].as_str().unwrap().to_string());
    }
    // Every replica serves every stored answer, whichever replica gave it.
    for replica in &cluster.replicas {
        for answer in &answers {
            let stored: Value = replica
                .get(&format!("/v1/answers/{answer}"), &key)
                .json()
                .unwrap();
            assert_eq!(
                stored["status"], "succeeded",
                "{} on {}",
                stored, replica.base
            );
        }
    }
    for _ in 0..6 {
        let res = lb
            .req(reqwest::Method::POST, "/v1/search", &key)
            .json(&json!({ "query": "harbour ledger" }))
            .send()
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    let after = tallies(&cluster);
    let delta: Vec<(f64, f64, f64)> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.0 - b.0, a.1 - b.1, a.2 - b.2))
        .collect();
    eprintln!("per replica (answers, prefix-cache hit tokens, searches): {delta:?}");
    let answered: Vec<usize> = (0..3).filter(|&i| delta[i].0 > 0.0).collect();
    assert_eq!(
        answered.len(),
        1,
        "the questions went to several replicas: {delta:?}\n{}",
        lb.log_text()
    );
    let one = answered[0];
    assert_eq!(delta[one].0, questions.len() as f64, "{delta:?}");
    assert!(delta[one].1 > 0.0, "its prefix cache was hit: {delta:?}");
    for (i, d) in delta.iter().enumerate().filter(|&(i, _)| i != one) {
        assert_eq!(
            d.1, 0.0,
            "replica {i}'s prefix cache stayed flat: {delta:?}"
        );
    }
    let searched = delta.iter().filter(|d| d.2 > 0.0).count();
    assert!(
        searched >= 2,
        "requests without a key are spread by least connections: {delta:?}"
    );
}

/// Lines of `server`'s log that carry `job` and `phrase`.
fn log_lines(server: &Server, job: &str, phrase: &str) -> usize {
    server
        .log_text()
        .lines()
        .filter(|l| l.contains(job) && l.contains(phrase))
        .count()
}

/// Waits until one replica runs `job` and has embedded `percent` of it; returns that replica's index.
fn running_replica(cluster: &Cluster, key: &str, job: &str, percent: f64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let res = cluster.replicas[0].get(&format!("/v1/jobs/{job}"), key);
        assert_eq!(res.status(), 200, "the job could not be read");
        let v: Value = res.json().unwrap();
        assert!(
            ["queued", "running"].contains(&v["status"].as_str().unwrap()),
            "ended too early: {v}"
        );
        if v["step"] == "embed" && v["percent"].as_f64().unwrap() >= percent {
            let runs: Vec<usize> = (0..cluster.replicas.len())
                .filter(|&i| log_lines(&cluster.replicas[i], job, "ingesting") > 0)
                .collect();
            assert_eq!(runs.len(), 1, "one replica runs it");
            return runs[0];
        }
        assert!(Instant::now() < deadline, "never reached {percent}%: {v}");
        // Four polls a second: under the key's rate limit (600 a minute) with room for the test's
        // other requests, and still well inside an embedding of many seconds.
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_replica_killed_mid_ingestion_has_its_job_finished_by_another_with_nothing_lost_or_duplicated()
{
    let test = "replicas::takeover";
    let options = options().arg("--job-lease-secs", 2);
    let Some(mut cluster) = Cluster::start_sharing_originals(test, 3, &options) else {
        return;
    };
    let (_, key) = cluster.replicas[0].tenant("replicas");
    let (_, control_key) = cluster.replicas[0].tenant("control");
    let bytes = support::long_transcript(2);
    let res =
        cluster.replicas[0].upload(&key, &[("meetings.txt", bytes.clone(), "text/plain")], None);
    assert_eq!(res.status(), 202);
    let v: Value = res.json().unwrap();
    let (doc, job) = (
        v["document_id"].as_str().unwrap().to_string(),
        v["job_id"].as_str().unwrap().to_string(),
    );

    let victim = running_replica(&cluster, &key, &job, 20.0);
    cluster.replicas[victim].kill();
    let survivors: Vec<&Server> = (0..3)
        .filter(|&i| i != victim)
        .map(|i| &cluster.replicas[i])
        .collect();
    // The same file, ingested once without interruption, for its chunk count.
    let (_, control) = survivors[0].ingest(&control_key, "meetings.txt", bytes, "text/plain");
    assert_eq!(control["status"], "succeeded", "{control}");
    let ended = survivors[0].wait_job(&key, &job);
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["attempts"], 2, "{ended}");

    let taken_back: usize = survivors
        .iter()
        .map(|s| log_lines(s, &job, "recovered an interrupted ingestion job"))
        .sum();
    assert_eq!(taken_back, 1, "one replica took the job back");
    let reruns: usize = survivors
        .iter()
        .map(|s| log_lines(s, &job, "ingesting"))
        .sum();
    assert_eq!(reruns, 1, "and one ran it again");

    let got: Value = survivors[0]
        .get(&format!("/v1/documents/{doc}"), &key)
        .json()
        .unwrap();
    let controlled: Value = survivors[0]
        .get(
            &format!("/v1/documents/{}", control["document_id"].as_str().unwrap()),
            &control_key,
        )
        .json()
        .unwrap();
    let chunks = controlled["chunk_count"].as_i64().unwrap();
    assert_eq!(got["chunk_count"].as_i64().unwrap(), chunks, "{got}");
    for s in &survivors {
        within(
            BOUND,
            "every survivor's index holds the document once",
            || counts(s, &key) == (chunks, chunks, chunks),
        );
    }
}

#[test]
fn a_keys_rate_limit_is_counted_by_each_replica_so_each_admits_its_own_share() {
    let test = "replicas::rate_limits";
    let per_minute = 5;
    let options = options().arg("--rate-limit-per-minute", per_minute);
    let Some(cluster) = Cluster::start(test, 2, &options) else {
        return;
    };
    let [a, b] = &cluster.replicas[..] else {
        unreachable!()
    };
    let (_, key) = a.tenant("limited");
    let statuses = |r: &Server, n: usize| -> Vec<u16> {
        (0..n)
            .map(|_| r.get("/v1/documents", &key).status().as_u16())
            .collect()
    };
    let mut expected = vec![200; per_minute];
    expected.push(429);
    assert_eq!(statuses(a, per_minute + 1), expected, "replica a");
    assert_eq!(
        statuses(b, per_minute + 1),
        expected,
        "replica b admits its own share"
    );
}
