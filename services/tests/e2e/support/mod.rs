//! A real `docqa serve` for end-to-end tests: the built binary on a free loopback port, with its own
//! data directory, the real models (CPU engine), and SQLite or a fresh PostgreSQL database. Requests go
//! through real HTTP with `reqwest`.
//!
//! PostgreSQL: set `DOCQA_TEST_POSTGRES_URL` to a server's URL (a role allowed to create databases);
//! each server then gets a new database. Without it the PostgreSQL variants say so and return, unless
//! `DOCQA_REQUIRE_POSTGRES=1` (set by `.ci/run`), where that is a failure.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder, Response, multipart};
use serde_json::{Value, json};

/// The admin key every test server is started with.
pub const ADMIN_KEY: &str = "dq_test_admin_key_0123456789abcdef";

/// Which database a test server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file in the data directory (the default).
    Sqlite,
    /// A new database on the server named by `DOCQA_TEST_POSTGRES_URL`.
    Postgres,
}

/// Runs `body` once per database: SQLite, then PostgreSQL when one is configured.
#[macro_export]
macro_rules! on_both_databases {
    ($( $(#[$meta:meta])* fn $name:ident($db:ident) $body:block )*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                fn run($db: support::Database) $body
                #[test]
                $(#[$meta])*
                fn on_sqlite() { run(support::Database::Sqlite) }
                #[test]
                $(#[$meta])*
                fn on_postgres() {
                    if support::postgres_url().is_some() { run(support::Database::Postgres) }
                }
            }
        )*
    };
}

/// The PostgreSQL URL for tests, or None (after checking that none is required).
pub fn postgres_url() -> Option<String> {
    let url = std::env::var("DOCQA_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("DOCQA_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "DOCQA_REQUIRE_POSTGRES=1 but DOCQA_TEST_POSTGRES_URL is not set"
        );
        eprintln!("PostgreSQL variant not run: DOCQA_TEST_POSTGRES_URL is not set");
    }
    url
}

/// A new, empty PostgreSQL database; returns its URL.
pub fn fresh_postgres_database() -> String {
    let base = postgres_url().expect("a PostgreSQL URL");
    let name = format!("docqa_test_{}", uuid_like());
    let status = Command::new("psql")
        .arg(&base)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
        .arg(format!("CREATE DATABASE {name}"))
        .status()
        .expect("psql runs");
    assert!(status.success(), "cannot create database {name}");
    let (prefix, _) = base.rsplit_once('/').expect("URL has a database part");
    format!("{prefix}/{name}")
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}_{}", nanos, std::process::id())
}

/// Runs SQL on the PostgreSQL server of the tests (as its admin role); panics when it fails.
pub fn psql(sql: &str) {
    let base = postgres_url().expect("a PostgreSQL URL");
    let status = Command::new("psql")
        .arg(&base)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .status()
        .expect("psql runs");
    assert!(status.success(), "psql failed: {sql}");
}

/// Options of a test server.
#[derive(Debug, Clone)]
pub struct Options {
    /// Database.
    pub database: Database,
    /// `docqa serve` flags and their values.
    pub args: Vec<(String, String)>,
}

impl Options {
    /// Defaults for tests: loopback on a free port, keys required, a small KV cache and RAG window
    /// (fast CPU answers).
    pub fn new(database: Database) -> Self {
        let defaults = [
            ("--bind", "127.0.0.1:0"),
            ("--local-mode", "off"),
            ("--kv-cache-mib", "48"),
            ("--rag-window", "1024"),
            ("--max-answer-tokens", "64"),
        ];
        Options {
            database,
            args: defaults
                .iter()
                .map(|(f, v)| (f.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Leaves a flag out (a default or one set before).
    pub fn without(mut self, flag: &str) -> Self {
        self.args.retain(|(f, _)| f != flag);
        self
    }

    /// Sets a flag's value (replacing a default).
    pub fn arg(mut self, flag: &str, value: impl ToString) -> Self {
        self.args.retain(|(f, _)| f != flag);
        self.args.push((flag.to_string(), value.to_string()));
        self
    }
}

/// A running server and what it needs to be restarted on the same data.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its data directory (kept across restarts).
    pub data_dir: PathBuf,
    database_url: Option<String>,
    /// Whether the database is this server's alone (dropped with it) or shared with others.
    owns_database: bool,
    options: Options,
    _temp: Option<tempfile::TempDir>,
    log: PathBuf,
    /// HTTP client.
    pub http: Client,
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_docqa")
}

/// Runs a command to its end and returns what it printed; a failure shows its stderr.
pub fn succeed(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Server {
    /// Starts a server on a new data directory (and a new database).
    pub fn start(options: Options) -> Server {
        let database_url = match options.database {
            Database::Sqlite => None,
            Database::Postgres => Some(fresh_postgres_database()),
        };
        Self::start_with(options, database_url, true)
    }

    /// Starts a server on a new data directory and the existing database at `database_url`, which
    /// other servers share (it outlives this one). With `originals`, the data directory's `originals/`
    /// is a link to that folder, which other servers share too.
    pub fn start_on(options: Options, database_url: &str, originals: Option<&Path>) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        if let Some(shared) = originals {
            std::os::unix::fs::symlink(shared, temp.path().join("originals")).expect("link");
        }
        Self::start_in(temp, options, Some(database_url.to_string()), false)
    }

    fn start_with(options: Options, database_url: Option<String>, owns_database: bool) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        Self::start_in(temp, options, database_url, owns_database)
    }

    fn start_in(
        temp: tempfile::TempDir,
        options: Options,
        database_url: Option<String>,
        owns_database: bool,
    ) -> Server {
        let data_dir = temp.path().to_path_buf();
        let mut server = Server {
            child: None,
            base: String::new(),
            data_dir,
            database_url,
            owns_database,
            options,
            log: temp.path().join("server.log"),
            _temp: Some(temp),
            http: Client::builder()
                .timeout(Duration::from_secs(300))
                .build()
                .expect("client"),
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = Command::new(binary());
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(self.options.args.iter().flat_map(|(f, v)| [f, v]))
            .env("DOCQA_ADMIN_KEY", ADMIN_KEY)
            .env("RUST_LOG", "warn,docqa=info")
            .stdout(Stdio::piped())
            .stderr(log);
        if let Some(url) = &self.database_url {
            cmd.arg("--database-url").arg(url);
        }
        let mut child = cmd.spawn().expect("docqa starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("docqa listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(240)) {
            Ok(base) => self.base = base,
            Err(_) => panic!("docqa did not start; its log:\n{}", self.log_text()),
        }
    }

    /// The server's stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The PostgreSQL database of this server, if it uses one.
    pub fn database_name(&self) -> Option<String> {
        let url = self.database_url.as_ref()?;
        Some(url.rsplit('/').next()?.to_string())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then checks that the server exited cleanly and said it kept its cached KV blocks on
    /// disk for the next start.
    pub fn terminate_keeping_kv(&mut self) {
        assert!(self.terminate(), "a clean exit: {}", self.log_text());
        let log = self.log_text();
        assert!(
            log.contains("cached KV blocks kept for the next start"),
            "{log}"
        );
    }

    /// SIGTERM, then waits for a clean exit; returns whether it exited with success.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        false
    }

    /// Starts the server again on the same data directory and database.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Starts the server again on the same data directory and database, with `change` made to its
    /// options.
    pub fn restart_with(&mut self, change: impl FnOnce(Options) -> Options) {
        self.kill();
        let fresh = Options::new(self.options.database);
        let options = std::mem::replace(&mut self.options, fresh);
        self.options = change(options);
        self.launch();
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with `key` as bearer token (none for `None`).
    pub fn req(&self, method: reqwest::Method, path: &str, key: Option<&str>) -> RequestBuilder {
        let r = self.http.request(method, self.url(path));
        match key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// GET with a key.
    pub fn get(&self, path: &str, key: &str) -> Response {
        self.req(reqwest::Method::GET, path, Some(key))
            .send()
            .expect("GET")
    }

    /// POST JSON with a key.
    pub fn post(&self, path: &str, key: &str, body: &Value) -> Response {
        self.req(reqwest::Method::POST, path, Some(key))
            .json(body)
            .send()
            .expect("POST")
    }

    /// Asks `question` about document `doc` on `route` (at most `max_tokens` answer tokens); fails
    /// the test unless the answer comes back (200). Returns the answer.
    pub fn ask(
        &self,
        key: &str,
        (doc, route): (&str, &str),
        question: &str,
        max_tokens: usize,
    ) -> Value {
        let body = json!({
            "question": question, "route": route, "max_tokens": max_tokens,
            "scope": { "document_ids": [doc] },
        });
        let res = self.post("/v1/ask", key, &body);
        let status = res.status();
        let answer: Value = res.json().expect("json");
        assert_eq!(status, 200, "{question} ({route}): {answer}");
        answer
    }

    /// DELETE with a key.
    pub fn delete(&self, path: &str, key: &str) -> Response {
        self.req(reqwest::Method::DELETE, path, Some(key))
            .send()
            .expect("DELETE")
    }

    /// Creates a tenant; returns (tenant id, its key).
    pub fn tenant(&self, name: &str) -> (String, String) {
        let res = self.post("/v1/tenants", ADMIN_KEY, &json!({ "name": name }));
        assert_eq!(res.status(), 201, "tenant creation");
        let v: Value = res.json().expect("json");
        (
            v["tenant"]["id"].as_str().expect("id").to_string(),
            v["api_key"]["key"].as_str().expect("key").to_string(),
        )
    }

    /// Uploads files (name, bytes, content type); returns the response.
    pub fn upload(
        &self,
        key: &str,
        files: &[(&str, Vec<u8>, &str)],
        collection: Option<&str>,
    ) -> Response {
        let mut form = multipart::Form::new();
        for (name, bytes, mime) in files {
            let part = multipart::Part::bytes(bytes.clone())
                .file_name(name.to_string())
                .mime_str(mime)
                .expect("mime");
            form = form.part("file", part);
        }
        if let Some(c) = collection {
            form = form.text("collection", c.to_string());
        }
        self.req(reqwest::Method::POST, "/v1/documents", Some(key))
            .multipart(form)
            .send()
            .expect("upload")
    }

    /// Uploads one file and waits for its job to end; returns (document id, final job JSON).
    pub fn ingest(&self, key: &str, name: &str, bytes: Vec<u8>, mime: &str) -> (String, Value) {
        let res = self.upload(key, &[(name, bytes, mime)], None);
        assert_eq!(res.status(), 202, "upload accepted");
        let v: Value = res.json().expect("json");
        let doc = v["document_id"].as_str().expect("document id").to_string();
        let job = v["job_id"].as_str().expect("job id").to_string();
        (doc, self.wait_job(key, &job))
    }

    /// Ingests SQuAD 2.0 dev article `index` as `TITLE.txt` and requires its job to succeed; returns
    /// the document id and the article's answerable questions with their answers.
    pub fn ingest_squad_article(
        &self,
        key: &str,
        index: usize,
    ) -> (String, Vec<(String, Vec<String>)>) {
        self.ingest_squad_opening(key, index, usize::MAX)
    }

    /// [`Self::ingest_squad_article`] cut to its first `chars` characters (about 4.2 to a token): for a
    /// test that needs a prompt of a few chunks, not a whole article's read on the CPU. The questions
    /// are the whole article's.
    pub fn ingest_squad_opening(
        &self,
        key: &str,
        index: usize,
        chars: usize,
    ) -> (String, Vec<(String, Vec<String>)>) {
        let (title, text, questions) = squad_article(index);
        let text: String = text.chars().take(chars).collect();
        let (doc, job) = self.ingest(
            key,
            &format!("{title}.txt"),
            text.into_bytes(),
            "text/plain",
        );
        assert_eq!(job["status"], "succeeded", "{job}");
        (doc, questions)
    }

    /// Polls a job until it has ended; returns its last state.
    pub fn wait_job(&self, key: &str, job_id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let v: Value = self
                .get(&format!("/v1/jobs/{job_id}"), key)
                .json()
                .expect("job json");
            let status = v["status"].as_str().unwrap_or_default().to_string();
            if ["succeeded", "failed", "cancelled"].contains(&status.as_str()) {
                return v;
            }
            assert!(Instant::now() < deadline, "job {job_id} did not end: {v}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if let Some(url) = self.database_url.as_ref().filter(|_| self.owns_database) {
            drop_postgres_database(url);
        }
    }
}

/// Drops the PostgreSQL database at `url` (made by [`fresh_postgres_database`]), if it still exists.
pub fn drop_postgres_database(url: &str) {
    let Some(base) = postgres_url() else { return };
    let name = url.rsplit('/').next().unwrap_or_default();
    let _ = Command::new("psql")
        .arg(base)
        .args(["-q", "-c"])
        .arg(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .status();
}

#[path = "../../../../tests/support/test_data.rs"]
pub mod test_data;

/// A long real document, the QMSum fixture's meeting transcript (about 30,000 characters) `copies` times
/// over: its ingestion takes many seconds.
pub fn long_transcript(copies: usize) -> Vec<u8> {
    let path = test_data::fixture("qa/qmsum_val.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().expect("a meeting");
    let meeting = serde_json::from_str::<Value>(first).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    vec![meeting; copies]
        .join(
            "

",
        )
        .into_bytes()
}

pub mod cluster;

/// SQuAD 2.0 dev article `index` (its number in the full dev file) from the QA fixture, which holds
/// the articles the tests ingest, each whole with its first questions of each kind.
fn squad_record(index: usize) -> Value {
    let path = test_data::fixture("qa/squad2_articles_dev.jsonl");
    let id = format!("squad2-dev-article-{index:02}");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("json line"))
        .find(|v| v["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} is not in {} (tests/fixtures/cut.py)", path.display()))
}

/// One article of the SQuAD 2.0 dev set: (title, text, answerable questions with their answers).
pub fn squad_article(index: usize) -> (String, String, Vec<(String, Vec<String>)>) {
    let v = squad_record(index);
    let questions = v["questions"]
        .as_array()
        .expect("questions")
        .iter()
        .filter_map(|q| {
            let answers: Vec<String> = q["answers"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let question = q["question"].as_str()?.to_string();
            (!answers.is_empty()).then_some((question, answers))
        })
        .collect();
    (
        v["title"].as_str().expect("title").to_string(),
        v["text"].as_str().expect("text").to_string(),
        questions,
    )
}

/// The unanswerable questions of SQuAD 2.0 dev article `index` (those without answers), in file order.
pub fn squad_unanswerable(index: usize) -> Vec<String> {
    squad_record(index)["questions"]
        .as_array()
        .expect("questions")
        .iter()
        .filter(|q| q["kind"] == "unanswerable")
        .filter_map(|q| q["question"].as_str().map(str::to_string))
        .collect()
}

/// Reads server-sent events from a streaming response: (event name, data) pairs.
pub fn read_events(res: Response) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let mut name = String::new();
    let mut data = Vec::new();
    for line in BufReader::new(res).lines() {
        let line = line.expect("stream line");
        if line.is_empty() {
            if !data.is_empty() {
                events.push((std::mem::take(&mut name), data.join("\n")));
                data.clear();
            }
            continue;
        }
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            data.push(d.to_string());
        }
    }
    events
}
