//! Several `docqa serve` replicas on one PostgreSQL database, each with its own data directory on a free
//! loopback port, and HAProxy from Debian's package in front of them, running the shipped
//! `deploy/haproxy.cfg` as it is (the replicas' addresses go in through its environment variables).
//!
//! Without PostgreSQL (`DOCQA_TEST_POSTGRES_URL`) or without `haproxy` (on `PATH`, in `/usr/sbin`, or
//! named by `DOCQA_HAPROXY`) a test says `skipped: <test>: <reason>` and passes, unless
//! `DOCQA_REQUIRE_POSTGRES=1` or `DOCQA_REQUIRE_HAPROXY=1` (set by `.ci/run`), where that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder};

use super::{Options, Server, drop_postgres_database, fresh_postgres_database, postgres_url};

/// Replicas sharing one database (and perhaps one originals folder); both go when the cluster does.
pub struct Cluster {
    /// The replicas, in start order.
    pub replicas: Vec<Server>,
    database_url: String,
    _originals: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Starts `n` replicas with `options` (its database choice is ignored) on a new PostgreSQL
    /// database, all at once, as a deployment would; None, after saying why, without PostgreSQL.
    pub fn start(test: &str, n: usize, options: &Options) -> Option<Cluster> {
        Self::start_with(test, n, options, false)
    }

    /// As [`Cluster::start`], with every replica's `originals/` on one shared folder (as on a shared
    /// filesystem), so any replica can read any upload.
    pub fn start_sharing_originals(test: &str, n: usize, options: &Options) -> Option<Cluster> {
        Self::start_with(test, n, options, true)
    }

    fn start_with(test: &str, n: usize, options: &Options, share: bool) -> Option<Cluster> {
        if postgres_url().is_none() {
            eprintln!("skipped: {test}: no PostgreSQL (set DOCQA_TEST_POSTGRES_URL)");
            return None;
        }
        let originals = share.then(|| tempfile::tempdir().expect("temp dir"));
        let shared = originals.as_ref().map(|d| d.path());
        let database_url = fresh_postgres_database();
        let replicas = std::thread::scope(|s| {
            let starting: Vec<_> = (0..n)
                .map(|_| s.spawn(|| Server::start_on(options.clone(), &database_url, shared)))
                .collect();
            starting
                .into_iter()
                .map(|t| t.join().expect("a replica starts"))
                .collect()
        });
        Some(Cluster {
            replicas,
            database_url,
            _originals: originals,
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.replicas.clear();
        drop_postgres_database(&self.database_url);
    }
}

/// The `haproxy` executable, or None (after saying why) when there is none and none is required.
pub fn haproxy(test: &str) -> Option<PathBuf> {
    let named = std::env::var_os("DOCQA_HAPROXY").map(PathBuf::from);
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("haproxy"));
    let found = named.into_iter().chain(on_path).find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("DOCQA_REQUIRE_HAPROXY").as_deref() != Ok("1"),
            "DOCQA_REQUIRE_HAPROXY=1 but there is no haproxy (apt-get install haproxy)"
        );
        eprintln!("skipped: {test}: no haproxy (apt-get install haproxy, or set DOCQA_HAPROXY)");
    }
    found
}

/// HAProxy running `deploy/haproxy.cfg` in front of three replicas.
pub struct Balancer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    http: Client,
}

/// The shipped configuration.
fn shipped_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy.cfg")
}

/// A loopback port free at the moment of asking.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

impl Balancer {
    /// Starts `executable` on the shipped configuration in front of `replicas` (the file names three)
    /// and waits until it answers.
    pub fn start(executable: &Path, replicas: &[Server]) -> Balancer {
        assert_eq!(replicas.len(), 3, "deploy/haproxy.cfg names three replicas");
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("haproxy.log");
        let bind = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(executable);
        cmd.arg("-db")
            .arg("-f")
            .arg(shipped_config())
            .env("DOCQA_LB_BIND", &bind)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(dir.path().join("haproxy.err")).expect("log"));
        for (i, r) in replicas.iter().enumerate() {
            let address = r.base.trim_start_matches("http://");
            cmd.env(format!("DOCQA_REPLICA_{}", i + 1), address);
        }
        let balancer = Balancer {
            child: cmd.spawn().expect("haproxy starts"),
            base: format!("http://{bind}"),
            log,
            _dir: dir,
            http: Client::builder()
                .timeout(Duration::from_secs(300))
                .build()
                .expect("client"),
        };
        balancer.wait_until_it_answers();
        balancer
    }

    fn wait_until_it_answers(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answered = self.http.get(self.url("/readyz")).send();
            if answered.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "haproxy did not answer; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// HAProxy's log so far (one line per request: which backend and server took it) and its errors.
    pub fn log_text(&self) -> String {
        let errors = self.log.with_file_name("haproxy.err");
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(errors).unwrap_or_default()
        )
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request through the balancer with `key` as bearer token.
    pub fn req(&self, method: reqwest::Method, path: &str, key: &str) -> RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(key)
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
