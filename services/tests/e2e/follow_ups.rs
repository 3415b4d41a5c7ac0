//! Follow-up questions with the real reader: `follow_up_of` carries the conversation into the prompt (the
//! earlier turns' tokens come from the KV prefix cache), so "And inside?" is understood after a question
//! about the roof; the OpenAI endpoint does the same with a chat's earlier messages. A follow-up of an
//! answer that does not exist, or is another tenant's, is a 404.

use crate::support;

use serde_json::{Value, json};
use support::{Database, Options, Server};

const LEASE: &str = "Lease agreement between Harbor Lights Cooperative and Oban Marine Ltd.\n\nThe \
    lease starts on 1 July 2021 and ends on 30 June 2031. The tenant pays a rent of 4,100 euros a month, \
    due on the first day of each month. The deposit is three months of rent. The landlord repairs the \
    roof and the outer walls; the tenant repairs everything inside. Either party may end the lease early \
    with six months of notice in writing.";

fn ask(server: &Server, key: &str, body: Value) -> (u16, Value) {
    let res = server.post("/v1/ask", key, &body);
    (res.status().as_u16(), res.json().unwrap())
}

#[test]
fn a_follow_up_question_is_answered_in_the_light_of_the_conversation_before_it() {
    let server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("harbor");
    let (doc, _) = server.ingest(&key, "lease.txt", LEASE.as_bytes().to_vec(), "text/plain");
    let scope = json!({ "document_ids": [doc] });

    let (status, first) = ask(
        &server,
        &key,
        json!({ "question": "Who repairs the roof?", "scope": scope }),
    );
    assert_eq!(status, 200, "{first}");
    let first_id = first["answer_id"].as_str().unwrap();
    let (_, alone) = ask(
        &server,
        &key,
        json!({ "question": "And inside?", "scope": scope }),
    );
    let (status, follow_up) = ask(
        &server,
        &key,
        json!({
            "question": "And inside?", "scope": scope, "follow_up_of": first_id,
        }),
    );
    assert_eq!(status, 200, "{follow_up}");
    let text = follow_up["answer"].as_str().unwrap();
    assert!(
        text.contains("tenant"),
        "the follow-up was not understood: {text:?} (alone: {alone})"
    );

    // The earlier turn is in the prompt, and what the first question read comes from the cache.
    let tokens = |a: &Value, field: &str| a["usage"][field].as_u64().unwrap();
    assert!(tokens(&follow_up, "prompt_tokens") > tokens(&alone, "prompt_tokens"));
    assert!(tokens(&follow_up, "cached_prompt_tokens") >= tokens(&first, "prompt_tokens") - 32);
    let stored: Value = server
        .get(
            &format!("/v1/answers/{}", follow_up["answer_id"].as_str().unwrap()),
            &key,
        )
        .json()
        .unwrap();
    assert_eq!(stored["follow_up_of"], first_id);
    assert_eq!(stored["question"], "And inside?");

    // The OpenAI endpoint reads the same conversation from the chat's messages.
    let res = server.post(
        "/v1/chat/completions",
        &key,
        &json!({
            "model": "docqa", "docqa": { "document_ids": [doc] },
            "messages": [
                { "role": "user", "content": "Who repairs the roof?" },
                { "role": "assistant", "content": first["answer"] },
                { "role": "user", "content": "And inside?" },
            ],
        }),
    );
    assert_eq!(res.status(), 200);
    let chat: Value = res.json().unwrap();
    let content = chat["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("tenant"), "{content:?}");

    // Following up nothing, or another tenant's answer.
    let (status, body) = ask(
        &server,
        &key,
        json!({ "question": "And?", "follow_up_of": "no-such-answer" }),
    );
    assert_eq!(
        (status, body["error_type"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (_, other_key) = server.tenant("elsewhere");
    let (status, _) = ask(
        &server,
        &other_key,
        json!({ "question": "And?", "follow_up_of": first_id }),
    );
    assert_eq!(status, 404);
}
