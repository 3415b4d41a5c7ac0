//! The shipped reader, served as users get it (the default adapter merged into SmolLM2-135M on the CPU
//! engine): on a SQuAD 2.0 dev article it answers an answerable question with the gold span and cites
//! its source, and refuses a question the article does not answer ("Who invaded Scotland in the 10th
//! century?": the article speaks of the Normans in Scotland, never of a 10th-century invasion), where
//! the base model answers both with a guess.

use crate::support;

use support::{Database, Options, Server};

/// SQuAD 2.0 dev article 0, "Normans".
const ARTICLE: usize = 0;

#[test]
fn the_served_reader_answers_with_the_gold_span_and_refuses_what_the_article_does_not_say() {
    let server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("reader");
    let info: serde_json::Value = server.get("/v1/info", &key).json().expect("json");
    assert_eq!(info["adapter"]["name"], "docqa-reader", "{info}");
    let (doc, _) = server.ingest_squad_article(&key, ARTICLE);

    let answered = server.ask(&key, (&doc, "rag"), "Who bought the rights?", 24);
    assert_eq!(answered["answerable"], true, "{answered}");
    let said = answered["answer"].as_str().unwrap_or_default();
    assert!(said.contains("Enrique Pérez de Guzmán"), "{answered}");
    assert!(
        !answered["citations"]
            .as_array()
            .expect("citations")
            .is_empty(),
        "{answered}"
    );

    let refused = server.ask(
        &key,
        (&doc, "rag"),
        "Who invaded Scotland in the 10th century?",
        24,
    );
    assert_eq!(refused["answerable"], false, "{refused}");
    assert_eq!(refused["answer"], "Not found in the document.", "{refused}");
}
