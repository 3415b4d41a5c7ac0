//! Table-driven sentence boundaries: each case is a list of sentences; joined with the case's
//! separator they must come back out of the segmenter exactly.

use docqa_indexer::chunk::sentences;

/// (separator, sentences).
const CASES: &[(&str, &[&str])] = &[
    // Abbreviations before names and numbers.
    (
        " ",
        &[
            "Dr. Smith met Mr. Jones at 10 a.m. on Monday.",
            "They talked.",
        ],
    ),
    (
        " ",
        &[
            "Mr. and Mrs. Dursley lived at No. 4 Privet Drive.",
            "They were proud of it.",
        ],
    ),
    (
        " ",
        &["See Fig. 3 and Eq. 12 for details.", "Both are clear."],
    ),
    (
        " ",
        &[
            "Fruit, e.g. apples, is healthy, i.e. good for you.",
            "Eat more.",
        ],
    ),
    (" ", &["J. K. Rowling wrote the books.", "They sold well."]),
    (
        " ",
        &["The U.S. Army was founded in 1775.", "It grew quickly."],
    ),
    (
        " ",
        &["He moved to the U.S.", "The weather was better there."],
    ),
    (" ", &["Apples, pears, etc. are fruit.", "Bananas are too."]),
    (
        " ",
        &["He bought apples, pears, etc.", "Then he went home."],
    ),
    (
        " ",
        &["Smith et al. reported it in 2019.", "Others agreed."],
    ),
    // Numbers, URLs and e-mail addresses.
    (
        " ",
        &[
            "Pi is about 3.14159 and e is 2.718.",
            "Both are irrational.",
        ],
    ),
    (" ", &["Prices rose 2.5% in Q3.", "Analysts expected 1.8%."]),
    (
        " ",
        &[
            "Visit https://example.com/a.b?x=1&Y=2 for details.",
            "Then log in.",
        ],
    ),
    (
        " ",
        &["Write to jane.doe@example.org today.", "She replies fast."],
    ),
    (" ", &["Version 2.0.1 fixed it.", "Upgrade now."]),
    // Ellipses, quotes and brackets after the terminal punctuation.
    (" ", &["He paused...", "Then he spoke."]),
    (" ", &["Wait... what did you say?", "Nothing."]),
    (" ", &["\"Stop!\" she cried.", "Nobody listened."]),
    (" ", &["She asked, \"Why not?\"", "He shrugged."]),
    (" ", &["(This one is in brackets.)", "This one is not."]),
    (
        " ",
        &[
            "'Promise me this.'",
            "After the King had promised, she died.",
        ],
    ),
    (" ", &["“Really?” he asked.", "“Yes!”", "She smiled."]),
    (" ", &["Is it true?!", "It is."]),
    // Chinese: 。！？；…… and full-width quotes and brackets.
    ("", &["今天天气很好。", "我们去公园吧！", "你去吗？"]),
    ("", &["操笑曰：“云长何如此之俭乎？”", "公曰：“某非俭也。”"]),
    ("", &["他说：“我明白了……”", "然后离开了。"]),
    (
        "",
        &["天下大势，分久必合，合久必分；", "周末七国分争，并入于秦。"],
    ),
    ("", &["「你好！」", "他笑着说。"]),
    ("", &["『走吧。』", "她回答。"]),
    ("", &["圆周率约为3.14。", "这是常识。"]),
    ("", &["（这是括号里的话。）", "这不是。"]),
    (
        "",
        &["对下游地区有著毁灭性破坏。", "（堰塞湖亦可用于发电。）"],
    ),
    ("", &["他说完了。", "“你好。”", "她回答。"]),
    // Mixed English and Chinese.
    (" ", &["我们使用 Python 3.11 版本。", "It works well."]),
    (" ", &["He said “你好。”", "Then he left."]),
    // Transcripts: one turn per line, with or without final punctuation.
    (
        "\n",
        &[
            "Professor E: Doesn't look like it crashed .",
            "Grad G: I keep starting it and then {disfmarker}",
            "PhD A: Sounds like an initialization thing .",
        ],
    ),
    (
        "\n",
        &[
            "Project Manager: Okay",
            "Marketing: Yeah",
            "User Interface: Mm-hmm.",
        ],
    ),
    (
        "\n",
        &[
            "Mr. Garnett Genuis (Sherwood Park, CPC): Thank you, Mr. Chair.",
            "The Chair (Hon. Anthony Rota): Go ahead.",
        ],
    ),
    // Paragraph breaks and headings.
    (
        "\n\n",
        &[
            "A heading without a period",
            "The next paragraph starts here.",
        ],
    ),
    (
        "\n",
        &[
            "Introduction",
            "Social media platforms spread news quickly.",
        ],
    ),
];

#[test]
fn every_table_case_is_split_into_its_sentences() {
    let mut failures = Vec::new();
    for (sep, expected) in CASES {
        let text = expected.join(sep);
        let got = sentences(&text);
        if got != *expected {
            failures.push(format!(
                "{text:?}\n  expected {expected:?}\n  got      {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn hard_wrapped_lines_do_not_end_sentences() {
    let text = "There was once upon a time a King who had a wife with golden hair,\n\
and she was so beautiful that you couldn't find anyone like her in the\n\
world. It happened that she fell ill, and when she felt that she must\n\
soon die, she sent for the King, and said, 'If you want to marry after\n\
my death, make no one queen unless she is just as beautiful as I am, and\n\
has just such golden hair as I have. Promise me this.' After the King\n\
had promised her this, she closed her eyes and died.";
    let got = sentences(text);
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(got[0].ends_with("in the\nworld."));
    assert!(got[1].ends_with("as I have."));
    assert_eq!(got[2], "Promise me this.'");
    assert!(got[3].starts_with("After the King\nhad promised"));
}

#[test]
fn a_line_ending_without_punctuation_ends_a_sentence_when_lines_are_not_wrapped() {
    let text = "Agenda\nBudget review.\nStaffing\nNext steps are due Friday.";
    assert_eq!(
        sentences(text),
        [
            "Agenda",
            "Budget review.",
            "Staffing",
            "Next steps are due Friday."
        ]
    );
}

#[test]
fn a_sentence_starting_late_in_a_wrapped_line_continues_on_the_next_line() {
    let text = "It was a cold winter morning and the snow lay deep on the fields. Then the\n\
King rode out with all his huntsmen and his dogs, and the Queen watched\n\
from the window of the tower until she could see them no more. At last\n\
she turned away and sat down by the fire with her spinning wheel and\n\
thought of her home far over the sea.";
    let got = sentences(text);
    assert_eq!(got.len(), 3, "{got:#?}");
    assert!(got[1].starts_with("Then the\nKing rode out"));
    assert!(got[2].starts_with("At last\nshe turned"));
}
