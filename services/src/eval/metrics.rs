//! Answer metrics: SQuAD-style normalised exact match and token F1, ROUGE-L, multiple-choice accuracy,
//! and character-level F1 for Chinese. Each takes the best score over the reference answers.

use std::collections::HashMap;

/// SQuAD normalisation, in the official evaluation's order: lower case, punctuation removed (so
/// "Levi's" is "levis"), articles (a, an, the) dropped as words, single spaces. Chinese and typographic
/// punctuation goes with the ASCII set.
pub fn normalize(text: &str) -> String {
    let lowered: String = text
        .to_lowercase()
        .chars()
        .filter(|&c| !(c.is_ascii_punctuation() || is_cjk_punctuation(c)))
        .collect();
    lowered
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_cjk_punctuation(c: char) -> bool {
    matches!(
        c,
        '，' | '。'
            | '、'
            | '；'
            | '：'
            | '？'
            | '！'
            | '“'
            | '”'
            | '‘'
            | '’'
            | '（'
            | '）'
            | '《'
            | '》'
            | '【'
            | '】'
            | '…'
            | '—'
    )
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF)
}

/// Whether the text is mostly Chinese (then F1 is computed over characters).
pub fn is_chinese(text: &str) -> bool {
    let (cjk, other) = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .fold(
            (0, 0),
            |(a, b), c| {
                if is_cjk(c) { (a + 1, b) } else { (a, b + 1) }
            },
        );
    cjk > 0 && cjk >= other
}

/// The tokens F1 counts: words, or for Chinese every non-space character.
fn tokens(text: &str, chinese: bool) -> Vec<String> {
    let norm = normalize(text);
    if chinese {
        norm.chars()
            .filter(|c| !c.is_whitespace())
            .map(String::from)
            .collect()
    } else {
        norm.split_whitespace().map(str::to_string).collect()
    }
}

/// 1 when the normalised prediction equals a normalised reference.
pub fn exact_match(prediction: &str, references: &[String]) -> f64 {
    let squash = |t: &str, chinese: bool| {
        let n = normalize(t);
        if chinese { n.replace(' ', "") } else { n }
    };
    let hit = references.iter().any(|r| {
        let chinese = is_chinese(r);
        squash(r, chinese) == squash(prediction, chinese)
    });
    f64::from(u8::from(hit))
}

fn f1_one(prediction: &str, reference: &str, chinese: bool) -> f64 {
    let p = tokens(prediction, chinese);
    let r = tokens(reference, chinese);
    if p.is_empty() || r.is_empty() {
        return f64::from(u8::from(p == r));
    }
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for t in &r {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0;
    for t in &p {
        if let Some(c) = counts.get_mut(t.as_str())
            && *c > 0
        {
            *c -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / p.len() as f64;
    let recall = same as f64 / r.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// Token F1 (character F1 when the reference is Chinese), best over references.
pub fn f1(prediction: &str, references: &[String]) -> f64 {
    references
        .iter()
        .map(|r| f1_one(prediction, r, is_chinese(r)))
        .fold(0.0, f64::max)
}

fn lcs(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                row[j + 1].max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// ROUGE-L F-measure (β = 1) over normalised tokens, best over references.
pub fn rouge_l(prediction: &str, references: &[String]) -> f64 {
    references
        .iter()
        .map(|r| {
            let chinese = is_chinese(r);
            let (p, r) = (tokens(prediction, chinese), tokens(r, chinese));
            let l = lcs(&p, &r);
            if l == 0 {
                return 0.0;
            }
            let (precision, recall) = (l as f64 / p.len() as f64, l as f64 / r.len() as f64);
            2.0 * precision * recall / (precision + recall)
        })
        .fold(0.0, f64::max)
}

/// The option letter an answer picks: `B`, `(B)`, `B)`, `Answer: B`, … (None when it names none).
pub fn chosen_letter(answer: &str) -> Option<char> {
    let a = answer.trim();
    let upper: Vec<char> = a.chars().collect();
    let is_option = |c: char| ('A'..='E').contains(&c);
    // "(B)" anywhere first.
    for w in upper.windows(3) {
        if w[0] == '(' && is_option(w[1]) && w[2] == ')' {
            return Some(w[1]);
        }
    }
    let stripped = a
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .trim_start_matches("Answer")
        .trim_start_matches("answer")
        .trim_start_matches(|c: char| !c.is_alphanumeric());
    let mut chars = stripped.chars();
    let first = chars.next()?;
    let next = chars.next();
    (is_option(first) && next.is_none_or(|c| !c.is_alphanumeric())).then_some(first)
}

/// Multiple-choice accuracy: references are the letter, then the option's text.
pub fn multiple_choice(answer: &str, references: &[String]) -> f64 {
    let Some(letter) = references.first().and_then(|r| r.trim().chars().next()) else {
        return 0.0;
    };
    if let Some(chosen) = chosen_letter(answer) {
        return f64::from(u8::from(chosen == letter));
    }
    let text = references.get(1).map(|t| normalize(t)).unwrap_or_default();
    f64::from(u8::from(
        !text.is_empty() && normalize(answer).contains(&text),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalisation_drops_case_punctuation_articles_and_extra_spaces() {
        assert_eq!(normalize("The  Cat, an apple!"), "cat apple");
        assert_eq!(normalize("Denver Broncos."), "denver broncos");
    }

    #[test]
    fn exact_match_and_f1_follow_the_squad_definitions() {
        // Worked by hand with the official evaluation's rules.
        assert_eq!(
            exact_match("the Denver Broncos", &refs(&["Denver Broncos"])),
            1.0
        );
        assert_eq!(exact_match("Broncos", &refs(&["Denver Broncos"])), 0.0);
        // prediction {denver, broncos, won}, reference {denver, broncos}: P 2/3, R 1, F1 0.8
        assert!((f1("Denver Broncos won", &refs(&["Denver Broncos"])) - 0.8).abs() < 1e-12);
        // best over references
        assert_eq!(
            f1(
                "Santa Clara",
                &refs(&["Levi's Stadium", "Santa Clara, California", "Santa Clara"])
            ),
            1.0
        );
        assert_eq!(f1("nothing alike", &refs(&["Denver Broncos"])), 0.0);
        // repeated tokens count once each: pred {the cat cat} → {cat, cat}, ref {cat}: P 1/2, R 1
        assert!((f1("the cat cat", &refs(&["cat"])) - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn rouge_l_uses_the_longest_common_subsequence() {
        // [police, killed, gunman] against [gunman, was, killed, by, police]: the words appear in
        // opposite orders, so the longest common subsequence is one word: P 1/3, R 1/5, F 0.25.
        let r = rouge_l(
            "police killed the gunman",
            &refs(&["the gunman was killed by police"]),
        );
        assert!((r - 0.25).abs() < 1e-12, "{r}");
        // identical up to normalisation
        assert_eq!(rouge_l("A cat sat.", &refs(&["the cat sat"])), 1.0);
        // [w x y z] against [w y z q]: LCS [w y z] = 3, P 3/4, R 3/4
        assert!((rouge_l("w x y z", &refs(&["w y z q"])) - 0.75).abs() < 1e-12);
        // [p q r] against [r q p q r]: LCS [p q r] = 3, P 1, R 3/5, F 0.75; best of two references
        let two = refs(&["x y", "r q p q r"]);
        assert!((rouge_l("p q r", &two) - 0.75).abs() < 1e-12);
        assert_eq!(rouge_l("", &refs(&["p q"])), 0.0);
    }

    #[test]
    fn squad_normalisation_matches_the_official_evaluation_script() {
        // The official script lower-cases, deletes ASCII punctuation, replaces the words a, an and the
        // by a space, and joins the words with single spaces, in that order.
        assert_eq!(normalize("Levi's Stadium"), "levis stadium");
        assert_eq!(normalize("an-apple"), "anapple");
        assert_eq!(normalize("The the  THE, cat."), "cat");
        assert_eq!(normalize("theory of an answer"), "theory of answer");
        assert_eq!(normalize("(1,200)"), "1200");
        // SQuAD 2.0: an empty prediction for a question with no answer is right on both metrics, and
        // wrong against a real answer.
        assert_eq!(exact_match("", &refs(&[""])), 1.0);
        assert_eq!(f1("", &refs(&[""])), 1.0);
        assert_eq!(f1("", &refs(&["Denver"])), 0.0);
        // The SQuAD dev set's first question, "Which NFL team represented the AFC at Super Bowl 50?",
        // with its three references:
        let broncos = refs(&["Denver Broncos", "Denver Broncos", "Denver Broncos"]);
        assert_eq!(exact_match("Denver Broncos", &broncos), 1.0);
        assert_eq!(exact_match("the Denver Broncos.", &broncos), 1.0);
        // prediction [broncos] against [denver, broncos]: P 1, R 1/2, F1 2/3
        assert!((f1("Broncos", &broncos) - 2.0 / 3.0).abs() < 1e-12);
        // "Santa Clara, California" against "Levi's Stadium in the San Francisco Bay Area at Santa
        // Clara, California": 3 shared words of 3 and of 11 ("the" goes), P 1, R 3/11, F1 6/14
        let venue =
            refs(&["Levi's Stadium in the San Francisco Bay Area at Santa Clara, California"]);
        assert!((f1("Santa Clara, California", &venue) - 6.0 / 14.0).abs() < 1e-12);
    }

    #[test]
    fn chinese_f1_counts_characters() {
        // pred 京剧琴师们 (5 chars) vs ref 京剧琴师 (4): common 4 → P 4/5, R 1 → 8/9
        assert!((f1("京剧琴师们", &refs(&["京剧琴师"])) - 8.0 / 9.0).abs() < 1e-12);
        assert_eq!(f1("京剧琴师。", &refs(&["京剧琴师"])), 1.0);
        assert!(is_chinese("郝德泉从事什么职业？"));
    }

    #[test]
    fn multiple_choice_reads_the_letter_or_the_option_text() {
        let r = refs(&["B", "Their subconscious knew it"]);
        for a in [
            "B",
            "(B) Their subconscious",
            "Answer: B.",
            "The answer is (B).",
        ] {
            assert_eq!(multiple_choice(a, &r), 1.0, "{a}");
        }
        assert_eq!(multiple_choice("A", &r), 0.0);
        assert_eq!(
            multiple_choice("their subconscious knew it, clearly", &r),
            1.0
        );
        assert_eq!(chosen_letter("Because it was late"), None);
    }
}
