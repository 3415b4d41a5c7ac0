//! The evaluation's HTTP client: uploads documents, follows their jobs, asks, searches. The same client
//! talks to an in-process server or to a running `docqa serve`, so both give the same numbers.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::blocking::{Client, RequestBuilder, multipart};
use serde_json::{Value, json};

use crate::affinity;

/// A docqa server and the key to use.
#[derive(Clone)]
pub struct DocqaClient {
    http: Client,
    base: String,
    key: Option<String>,
}

impl DocqaClient {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str, key: Option<String>) -> anyhow::Result<Self> {
        let http = Client::builder()
            .timeout(Duration::from_secs(3600))
            .build()?;
        Ok(DocqaClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }

    fn with_key(&self, r: RequestBuilder) -> RequestBuilder {
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    fn json(&self, r: RequestBuilder) -> anyhow::Result<Value> {
        let res = self.with_key(r).send()?;
        let status = res.status();
        let body: Value = res.json().context("the server's answer is not JSON")?;
        if !status.is_success() {
            bail!("{status}: {}", body["message"].as_str().unwrap_or_default());
        }
        Ok(body)
    }

    /// Uploads `text` as a text file and waits for its ingestion; returns the document id.
    pub fn ingest(&self, file_name: &str, text: &str) -> anyhow::Result<String> {
        let part = multipart::Part::bytes(text.as_bytes().to_vec())
            .file_name(file_name.to_string())
            .mime_str("text/plain")?;
        self.upload_and_wait(file_name, part)
    }

    /// Uploads a file as it is (the server detects its format) and waits for its ingestion.
    pub fn ingest_file(&self, path: &Path) -> anyhow::Result<String> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let part = multipart::Part::bytes(bytes).file_name(file_name.clone());
        self.upload_and_wait(&file_name, part)
    }

    fn upload_and_wait(&self, file_name: &str, part: multipart::Part) -> anyhow::Result<String> {
        let form = multipart::Form::new().part("file", part);
        let v = self.json(
            self.http
                // An evaluation keeps its own copy even when the server holds the same file.
                .post(format!("{}/v1/documents?allow_duplicate=true", self.base))
                .multipart(form),
        )?;
        let doc = v["document_id"]
            .as_str()
            .context("no document id")?
            .to_string();
        let job = v["job_id"].as_str().context("no job id")?.to_string();
        let started = Instant::now();
        loop {
            let j = self.json(self.http.get(format!("{}/v1/jobs/{job}", self.base)))?;
            match j["status"].as_str() {
                Some("succeeded") => return Ok(doc),
                Some("failed") | Some("cancelled") => {
                    bail!(
                        "ingesting {file_name} failed: {}",
                        j["error"].as_str().unwrap_or_default()
                    )
                }
                _ if started.elapsed() > Duration::from_secs(3600) => {
                    bail!("ingesting {file_name} timed out")
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// A document's JSON.
    pub fn document(&self, id: &str) -> anyhow::Result<Value> {
        self.json(self.http.get(format!("{}/v1/documents/{id}", self.base)))
    }

    /// The server's `/v1/info`.
    pub fn info(&self) -> anyhow::Result<Value> {
        self.json(self.http.get(format!("{}/v1/info", self.base)))
    }

    /// The label of the adapter the server's generator merged (`none`, or `NAME@` and its digest's first
    /// 12 digits); `None` from a server too old to say.
    pub fn adapter_label(&self) -> anyhow::Result<Option<String>> {
        let info = self.info()?;
        let adapter: Option<crate::adapter::AdapterInfo> =
            serde_json::from_value(info["adapter"].clone()).ok();
        Ok(adapter.map(|a| a.label()))
    }

    /// Whether the server still has a ready document with this id.
    pub fn has_document(&self, id: &str) -> bool {
        self.document(id).is_ok_and(|d| d["status"] == "ready")
    }

    /// Drops everything the caller's tenant has in the server's KV cache; returns the blocks it freed.
    /// Behind a load balancer, the request goes where the questions about `document_id` go (the
    /// affinity header), so it empties the cache they will use.
    pub fn drop_kv_cache(&self, document_id: &str) -> anyhow::Result<u64> {
        let request = self
            .http
            .delete(format!("{}/v1/kv-cache", self.base))
            .header(affinity::HEADER, affinity::key(&[document_id]));
        let dropped = self.json(request)?;
        Ok(dropped["dropped_blocks"].as_u64().unwrap_or(0))
    }

    /// Asks a question about one document (greedy decoding), with the document as affinity key; returns
    /// the answer JSON.
    pub fn ask(
        &self,
        document_id: &str,
        question: &str,
        route: &str,
        max_tokens: usize,
    ) -> anyhow::Result<Value> {
        let body = json!({
            "question": question, "route": route, "max_tokens": max_tokens, "temperature": 0.0,
            "scope": { "document_ids": [document_id] },
        });
        let request = self
            .http
            .post(format!("{}/v1/ask", self.base))
            .header(affinity::HEADER, affinity::key(&[document_id]))
            .json(&body);
        self.json(request)
    }

    /// The texts of the `k` best chunks for `query` in one document.
    pub fn search(&self, document_id: &str, query: &str, k: usize) -> anyhow::Result<Vec<String>> {
        let body = json!({ "query": query, "k": k, "scope": { "document_ids": [document_id] } });
        let v = self.json(
            self.http
                .post(format!("{}/v1/search", self.base))
                .json(&body),
        )?;
        Ok(v["hits"]
            .as_array()
            .map(|hits| {
                hits.iter()
                    .filter_map(|h| h["text"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }
}
