//! Tenant isolation and keys: another tenant's documents, jobs and answers answer 404 to every
//! operation; a revoked key stops working at once; admin endpoints need the admin key.

use crate::support;

use serde_json::{Value, json};
use support::{ADMIN_KEY, Options, Server};

on_both_databases! {
    fn another_tenant_sees_nothing_and_revoked_keys_stop_at_once(db) {
        let server = Server::start(Options::new(db));
        let (tenant_a, key_a) = server.tenant("tenant-a");
        let (_, key_b) = server.tenant("tenant-b");
        let (doc, job) = server.ingest(&key_a, "a.txt", b"Alpha Corp signed the lease on 3 May. The rent is 900 euros.".to_vec(), "text/plain");
        assert_eq!(job["status"], "succeeded");
        let job_id = job["job_id"].as_str().unwrap();
        let answer: Value = server.post("/v1/ask", &key_a, &json!({ "question": "What is the rent?", "route": "rag", "max_tokens": 8 })).json().unwrap();
        let answer_id = answer["answer_id"].as_str().unwrap();

        // Tenant B: list is empty; every object of A is 404.
        let list: Value = server.get("/v1/documents", &key_b).json().unwrap();
        assert_eq!(list["total"], 0);
        for path in [format!("/v1/documents/{doc}"), format!("/v1/documents/{doc}/original"), format!("/v1/jobs/{job_id}"), format!("/v1/answers/{answer_id}")] {
            let res = server.get(&path, &key_b);
            assert_eq!(res.status(), 404, "{path}");
            let body: Value = res.json().unwrap();
            assert_eq!(body["error_type"], "not_found");
        }
        assert_eq!(server.delete(&format!("/v1/documents/{doc}"), &key_b).status(), 404);
        assert_eq!(server.post(&format!("/v1/jobs/{job_id}/cancel"), &key_b, &json!({})).status(), 404);
        let ask = server.post("/v1/ask", &key_b, &json!({ "question": "What is the rent?", "scope": { "document_ids": [doc] } }));
        assert_eq!(ask.status(), 404);
        let search: Value = server.post("/v1/search", &key_b, &json!({ "query": "rent lease" })).json().unwrap();
        assert_eq!(search["hits"].as_array().unwrap().len(), 0);
        // A still has it.
        assert_eq!(server.get(&format!("/v1/documents/{doc}"), &key_a).status(), 200);

        // A second key of A works, then is revoked and fails on the very next request.
        let created = server.post(&format!("/v1/tenants/{tenant_a}/keys"), ADMIN_KEY, &json!({ "name": "ci" }));
        assert_eq!(created.status(), 201);
        let created: Value = created.json().unwrap();
        let second = created["key"].as_str().unwrap();
        assert_eq!(server.get("/v1/documents", second).status(), 200);
        let keys: Value = server.get(&format!("/v1/tenants/{tenant_a}/keys"), ADMIN_KEY).json().unwrap();
        assert_eq!(keys.as_array().unwrap().len(), 2);
        assert!(keys.to_string().find(second).is_none(), "a key listing never shows secrets");
        assert_eq!(server.delete(&format!("/v1/keys/{}", created["id"].as_str().unwrap()), ADMIN_KEY).status(), 204);
        let res = server.get("/v1/documents", second);
        assert_eq!(res.status(), 401);
        assert_eq!(res.json::<Value>().unwrap()["error_type"], "unauthorized");
        // The first key of A is untouched.
        assert_eq!(server.get("/v1/documents", &key_a).status(), 200);
    }

    fn admin_endpoints_need_the_admin_key_and_data_endpoints_a_tenant_key(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("t");
        assert_eq!(server.get("/v1/tenants", &key).status(), 403);
        assert_eq!(server.get("/v1/documents", ADMIN_KEY).status(), 403);
        let tenants: Value = server.get("/v1/tenants", ADMIN_KEY).json().unwrap();
        assert_eq!(tenants.as_array().unwrap().len(), 1);
        // Same name twice: conflict.
        assert_eq!(server.post("/v1/tenants", ADMIN_KEY, &json!({ "name": "t" })).status(), 409);
    }
}

/// A caller who may not call gets 401 or 403 whatever the body holds: the key is looked up before any
/// extractor reads the body. The race this guards against answered 422 in some tries only, hence 30.
#[test]
fn a_caller_who_may_not_call_is_refused_before_the_body_is_judged() {
    use reqwest::Method;
    let server = Server::start(Options::new(support::Database::Sqlite));
    let (_, tenant_key) = server.tenant("t");
    let send = |path: &str, key: Option<&str>, body: &'static str| {
        server
            .req(Method::POST, path, key)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .expect("POST")
            .status()
            .as_u16()
    };
    for _ in 0..30 {
        assert_eq!(send("/v1/search", Some("dq_not_a_key"), "{not json"), 401);
        assert_eq!(send("/v1/search", None, "{\"query\": 7}"), 401);
        assert_eq!(send("/v1/tenants", Some(&tenant_key), ""), 403);
        assert_eq!(send("/v1/ask", Some(ADMIN_KEY), "[]"), 403);
    }
    // The same bodies from a caller who may call are judged on their merits.
    assert_eq!(send("/v1/search", Some(&tenant_key), "{not json"), 422);
    assert_eq!(send("/v1/tenants", Some(ADMIN_KEY), ""), 422);
}
