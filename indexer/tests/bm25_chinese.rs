//! Chinese and mixed-script tokenisation on the CMRC needle fixture, and needle retrieval over every
//! CMRC long document of the evaluation data (a rate over the whole file, run when it is there).

use crate::common;

use docqa_indexer::bm25::ChineseSegmentation;
use docqa_indexer::bm25::tokenizer::analyze;
use docqa_indexer::eval::runner::EvalOptions;
use docqa_indexer::eval::{evaluate_within_document, sentence_windows};

fn terms(seg: ChineseSegmentation, text: &str) -> Vec<String> {
    analyze(&mut seg.analyzer(), text)
}

#[test]
fn jieba_segments_chinese_into_words_and_english_is_stemmed() {
    let t = terms(
        ChineseSegmentation::Jieba,
        "《战国无双3》是由光荣和ω-force开发的Running游戏",
    );
    for w in ["战国", "无双", "3", "光荣", "开发", "游戏", "forc", "run"] {
        assert!(t.contains(&w.to_string()), "missing {w} in {t:?}");
    }
    assert!(!t.iter().any(|w| w == "《" || w == "的是"), "{t:?}");
}

#[test]
fn bigrams_cover_every_adjacent_pair_of_a_cjk_run_only() {
    let t = terms(ChineseSegmentation::Bigram, "三国演义 and 刘备");
    assert_eq!(
        t,
        vec!["三国", "国演", "演义", "刘备"],
        "'and' is an English stop word"
    );
    assert_eq!(terms(ChineseSegmentation::Bigram, "曹"), vec!["曹"]);
}

#[test]
fn real_cmrc_text_is_segmented_into_dictionary_words() {
    let path = common::test_data::fixture("qa/zh_cmrc_needle.jsonl");
    let line = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let doc: serde_json::Value = serde_json::from_str(&line).unwrap();
    let needle = doc["questions"][0]["evidence"][0]
        .as_str()
        .unwrap()
        .to_string();
    let t = terms(ChineseSegmentation::Jieba, &needle);
    let multi = t.iter().filter(|w| w.chars().count() >= 2).count();
    assert!(
        multi * 2 > t.len(),
        "most jieba terms should be words of 2+ characters: {t:?}"
    );
    let question = doc["questions"][0]["question"].as_str().unwrap();
    let q = terms(ChineseSegmentation::Jieba, question);
    assert!(
        q.iter()
            .filter(|w| w.chars().count() >= 2)
            .any(|w| t.contains(w)),
        "question {q:?} shares no word with its evidence"
    );
}

#[test]
fn the_default_segmentation_finds_the_needle_in_the_top5_for_90_percent_of_questions() {
    let Some(path) = common::test_data::evaluation_data("qa/zh_cmrc_needle.jsonl") else {
        return;
    };
    let chunker = |t: &str| sentence_windows(t, 300);
    let mut rates = Vec::new();
    for seg in [ChineseSegmentation::Jieba, ChineseSegmentation::Bigram] {
        let mut options = EvalOptions::default();
        options.search.bm25.chinese = seg;
        let report = evaluate_within_document(&path, &chunker, None, options).unwrap();
        let r5 = report.line("bm25").unwrap().recall[0];
        println!(
            "{seg:?}: needle in top 5 for {:.1}% of {} questions\n{report}",
            100.0 * r5,
            report.questions
        );
        rates.push((seg, r5));
    }
    let default = ChineseSegmentation::default();
    let (_, best) = rates
        .iter()
        .copied()
        .fold((default, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let default_rate = rates.iter().find(|(s, _)| *s == default).unwrap().1;
    assert!(default_rate >= 0.9, "default top-5 rate {default_rate}");
    assert!(
        default_rate >= best,
        "the default should be the better segmentation: {rates:?}"
    );
}
