#!/usr/bin/env python3
"""Test abstention measures that come from the document, not from the model's probabilities.

``bench/abstention.py`` found that none of SmolLM2-135M's token-probability measures separates answerable from
unanswerable SQuAD 2.0 questions on held-out articles. This script computes, for every answer of the same runs
(joined by question id with the dataset for the question and the article), measures of how well the article
supports the question and the answer, and tests them with the same protocol:

- question coverage: the share of the question's content words (lower-cased, without stopwords, lightly
  stemmed) found in the article's best-matching sentence, IDF-weighted (IDF over the article's sentences,
  ``q_cover_idf``) and not (``q_cover``); the number and the IDF-weighted share of the question's content words
  absent from the whole article (``q_missing``, ``q_missing_idf``); the share of the question's content-word
  bigrams found in one sentence (``q_bigrams``); the question's numbers and capitalised words (not its first
  word) absent from the article (``q_names_missing``) and from its best-matching sentence
  (``q_names_off_sentence``, a swapped name);
- answer grounding: the share of the answer's content words that are not in the question found in the best
  question-matching sentence (``a_in_sentence``) and in the article (``a_in_article``); the question coverage
  of the sentence the answer came from, the one holding most of those words (``q_cover_at_answer``); and
  whether that is the best question-matching sentence (``a_agrees``).

``q_negated`` (the question holds "not", "never", "no" ...) is reported for reference only: it is how many of
SQuAD 2.0's unanswerable questions were written, not a sign of what the document holds, so it is never chosen.

For each route: every measure's AUC on the calibration run, the test run and both (with a 95 % bootstrap
interval over questions on the test run); the threshold chosen on the calibration run (the highest abstention
recall whose precision is at least ``--min-precision`` over at least ``--min-abstentions`` abstentions, as in
``bench/abstention.py``), and on the test run its abstention precision and recall and the change in mean F1 over
answerable questions, counting an abstained answer as 0. Then two combinations of the three document measures
with the highest calibration AUC, fitted on the calibration run only: a logistic regression and the mean of
their calibration percentiles. Last, since the question measures need no answer, the same test of them on
every question of the calibration and test articles.

Run: python3 bench/abstention_support.py --calibrate RUN_A --test RUN_B --dataset squad2_articles_dev.jsonl
     [--routes rag,long] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import random
import re
from pathlib import Path

_STOPWORDS = """a about above after again against all also am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers him his how i if in into is it its itself just me more most my no nor not of off on once only or
    other our out over own same she should so some such than that the their them then there these they this
    those through to too under until up very was we were what when where which while who whom whose why will
    with would you your yours one ones many much"""
STOPWORDS = frozenset(_STOPWORDS.split())
NEGATIONS = frozenset({"not", "never", "no", "nor", "none", "nothing", "neither", "cannot"})
WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
# What the generator writes around its answers: the preamble it repeats and the page citations it adds.
PREAMBLE = re.compile(r"^\s*the answer to (?:this|the) question is:?", re.IGNORECASE)
CITATION = re.compile(r"\(page \d+\)", re.IGNORECASE)

DOCUMENT_MEASURES = [
    "q_cover_idf",
    "q_cover",
    "q_missing",
    "q_missing_idf",
    "q_bigrams",
    "q_names_missing",
    "q_names_off_sentence",
    "a_in_sentence",
    "a_in_article",
    "q_cover_at_answer",
    "a_agrees",
]
QUESTION_MEASURES = [m for m in DOCUMENT_MEASURES if m.startswith("q_") and m != "q_cover_at_answer"]
REFERENCE_ONLY = ["q_negated"]
MEASURES = DOCUMENT_MEASURES + REFERENCE_ONLY
COMBINED = 3


def stem(word: str) -> str:
    """A light suffix stemmer: plural -s/-es/-ies, then -ing/-ed, then a doubled final consonant and a final -e."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls0123456789":
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    return WORD.findall(text.lower().replace("’", "'"))


def content_words(text: str) -> list[str]:
    """The text's content words (possessive 's dropped), stemmed, in order."""
    out = []
    for w in words(text):
        w = w.removesuffix("'s")
        if w and w not in STOPWORDS:
            out.append(stem(w))
    return out


def bigrams(terms: list[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(terms))


class Article:
    """An article cut into sentences, with its content words and their IDF over its sentences."""

    def __init__(self, text: str) -> None:
        self.sentences: list[list[str]] = []
        self.paragraph: list[int] = []
        for p, para in enumerate(re.split(r"\n\s*\n", text)):
            for s in SENTENCE_END.split(para):
                terms = content_words(s)
                if terms:
                    self.sentences.append(terms)
                    self.paragraph.append(p)
        self.sets = [set(s) for s in self.sentences]
        self.pairs = [bigrams(s) for s in self.sentences]
        self.vocabulary = set().union(*self.sets)
        self.raw = {w.removesuffix("'s") for w in words(text)}
        df: dict[str, int] = {}
        for s in self.sets:
            for w in s:
                df[w] = df.get(w, 0) + 1
        self.df = df

    def idf(self, w: str) -> float:
        n = len(self.sentences)
        return math.log((n + 1) / (self.df.get(w, 0) + 1)) + 1.0

    def cover(self, terms: set[str], i: int, weighted: bool) -> float:
        """The share of `terms` found in sentence `i`, IDF-weighted or not."""
        weight = self.idf if weighted else (lambda _: 1.0)
        total = math.fsum(weight(w) for w in terms)
        return math.fsum(weight(w) for w in terms & self.sets[i]) / total if total else 0.0

    def best(self, terms: set[str]) -> int:
        """The sentence covering most of `terms`' IDF weight (the first on a tie)."""
        scores = [self.cover(terms, i, True) for i in range(len(self.sentences))]
        return max(range(len(scores)), key=lambda i: (scores[i], -i))


def names(question: str) -> list[str]:
    """The question's numbers and capitalised words (lower-cased, possessive 's dropped), its first word aside."""
    tokens = WORD.findall(question.replace("’", "'"))
    return [t.lower().removesuffix("'s") for t in tokens[1:] if t[0].isdigit() or t[0].isupper()]


def question_measures(article: Article, question: str) -> dict:
    terms = set(content_words(question))
    best = article.best(terms)
    missing = terms - article.vocabulary
    idf_total = math.fsum(article.idf(w) for w in terms)
    pairs = bigrams(content_words(question))
    return {
        "best": best,
        "q_cover_idf": article.cover(terms, best, True),
        "q_cover": max((article.cover(terms, i, False) for i in range(len(article.sentences))), default=0.0),
        "q_missing": -len(missing),
        "q_missing_idf": -math.fsum(article.idf(w) for w in missing) / idf_total if idf_total else 0.0,
        "q_bigrams": max((len(pairs & p) / len(pairs) for p in article.pairs), default=0.0) if pairs else 1.0,
        "q_names_missing": -sum(n not in article.raw for n in names(question)),
        "q_names_off_sentence": -sum(stem(n) not in article.sets[best] for n in names(question)),
        "q_negated": -float(any(w in NEGATIONS or w.endswith("n't") for w in words(question))),
    }


def answer_measures(article: Article, question: str, answer: str, q: dict) -> dict:
    """How well the article grounds the answer's words that the question does not already give."""
    text = CITATION.sub(" ", PREAMBLE.sub(" ", answer))
    new = set(content_words(text)) - set(content_words(question))
    if not new:
        source = q["best"]
        found_sentence = found_article = 1.0
    else:
        counts = [len(new & s) for s in article.sets]
        source = max(range(len(counts)), key=lambda i: (counts[i], i == q["best"], -i))
        found_sentence = len(new & article.sets[q["best"]]) / len(new)
        found_article = len(new & article.vocabulary) / len(new)
    return {
        "a_in_sentence": found_sentence,
        "a_in_article": found_article,
        "q_cover_at_answer": article.cover(set(content_words(question)), source, True),
        "a_agrees": float(source == q["best"]),
    }


def load_dataset(path: Path) -> tuple[dict[str, dict], dict[str, Article]]:
    """Questions by id (with their document) and the articles by id."""
    questions, articles = {}, {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        articles[doc["id"]] = Article(doc["text"])
        for q in doc["questions"]:
            questions[q["id"]] = {**q, "document": doc["id"]}
    return questions, articles


def load_run(path: Path, questions: dict, articles: dict, cache: dict) -> list[dict]:
    """The run's answered extractive and unanswerable results, each with its measures."""
    file = path / "results.jsonl" if path.is_dir() else path
    out = []
    for line in file.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if not r or r.get("error") is not None or r["kind"] not in ("extractive", "unanswerable"):
            continue
        q = questions[r["question_id"]]
        article = articles[q["document"]]
        if r["question_id"] not in cache:
            cache[r["question_id"]] = question_measures(article, q["question"])
        qm = cache[r["question_id"]]
        out.append({**r, "m": {**qm, **answer_measures(article, q["question"], r["answer"], qm)}})
    return out


def auc(scored: list[tuple[float, bool]]) -> float:
    """P(an answerable question's support > an unanswerable one's), ties counting half (from ranks)."""
    ordered = sorted(scored, key=lambda x: x[0])
    ranks = [0.0] * len(ordered)
    i = 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j][0] == ordered[i][0]:
            j += 1
        for k in range(i, j):
            ranks[k] = (i + j + 1) / 2
        i = j
    pos = [rank for rank, (_, answerable) in zip(ranks, ordered, strict=True) if answerable]
    n_pos, n_neg = len(pos), len(ordered) - len(pos)
    if not n_pos or not n_neg:
        return math.nan
    return (sum(pos) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def answerable(r: dict) -> bool:
    return r["kind"] != "unanswerable"


def scored(results: list[dict], measure: str) -> list[tuple[float, bool]]:
    return [(r["m"][measure], answerable(r)) for r in results]


def bootstrap(results: list[dict], measure: str, rounds: int = 1000) -> tuple[float, float]:
    """A 95 % percentile interval of the AUC, resampling questions."""
    rng = random.Random(7)
    values = scored(results, measure)
    aucs = sorted(auc([rng.choice(values) for _ in values]) for _ in range(rounds))
    aucs = [a for a in aucs if not math.isnan(a)]
    return aucs[int(0.025 * len(aucs))], aucs[int(0.975 * len(aucs)) - 1]


class Sweep:
    """Abstaining below thresholds of one measure: precision, recall and the F1 change, by bisection."""

    def __init__(self, results: list[dict], measure: str) -> None:
        rows = sorted((r["m"][measure], not answerable(r), r.get("f1") or 0.0) for r in results)
        self.values = [v for v, _, _ in rows]
        self.right = list(itertools.accumulate((u for _, u, _ in rows), initial=0))
        self.lost = list(itertools.accumulate(((0.0 if u else f1) for _, u, f1 in rows), initial=0.0))
        self.unanswerable = self.right[-1]
        self.answerable = len(rows) - self.unanswerable
        self.f1 = sum(f1 for _, u, f1 in rows if not u) / max(1, self.answerable)
        self.scored = any("f1" in r for r in results)

    def at(self, threshold: float) -> dict:
        k = bisect.bisect_left(self.values, threshold)
        right = self.right[k]
        return {
            "threshold": threshold,
            "abstained": k,
            "precision": right / k if k else math.nan,
            "recall": right / max(1, self.unanswerable),
            "answerable_refused": k - right,
            "f1_before": 100 * self.f1 if self.scored else None,
            "f1_after": 100 * (self.f1 - self.lost[k] / max(1, self.answerable)) if self.scored else None,
        }

    def candidates(self) -> list[float]:
        """Midpoints between consecutive distinct values, rounded to 3 decimals."""
        distinct = sorted(set(self.values))
        return sorted({round((a + b) / 2, 3) for a, b in itertools.pairwise(distinct)})

    def choose(self, min_precision: float, min_abstentions: int) -> dict | None:
        ok = [
            t
            for t in (self.at(x) for x in self.candidates())
            if t["abstained"] >= min_abstentions and t["precision"] >= min_precision
        ]
        return max(ok, key=lambda t: (t["recall"], -t["threshold"]), default=None)


def standardise(results: list[dict], names: list[str]) -> list[tuple[float, float]]:
    out = []
    for n in names:
        v = [r["m"][n] for r in results]
        mu = sum(v) / len(v)
        sd = math.sqrt(sum((x - mu) ** 2 for x in v) / len(v)) or 1.0
        out.append((mu, sd))
    return out


def fit_logistic(results: list[dict], names: list[str]) -> dict:
    """Logistic regression of answerable on standardised measures, by gradient descent with a little L2."""
    scale = standardise(results, names)
    xs = [[(r["m"][n] - mu) / sd for n, (mu, sd) in zip(names, scale, strict=True)] for r in results]
    ys = [1.0 if answerable(r) else 0.0 for r in results]
    w, b = [0.0] * len(names), 0.0
    for _ in range(3000):
        gw, gb = [0.01 * wi for wi in w], 0.0
        for x, y in zip(xs, ys, strict=True):
            z = b + sum(wi * xi for wi, xi in zip(w, x, strict=True))
            err = 1 / (1 + math.exp(-z)) - y
            gb += err / len(xs)
            gw = [g + err * xi / len(xs) for g, xi in zip(gw, x, strict=True)]
        w = [wi - 0.5 * g for wi, g in zip(w, gw, strict=True)]
        b -= 0.5 * gb
    return {"names": names, "scale": scale, "weights": w, "bias": b}


def apply_logistic(model: dict, r: dict) -> float:
    z = model["bias"] + sum(
        w * (r["m"][n] - mu) / sd
        for n, (mu, sd), w in zip(model["names"], model["scale"], model["weights"], strict=True)
    )
    return 1 / (1 + math.exp(-z))


def percentile_mean(reference: list[dict], names: list[str]):
    """The mean of each measure's percentile among the reference (calibration) answers."""
    sorted_values = {n: sorted(r["m"][n] for r in reference) for n in names}

    def score(r: dict) -> float:
        ranks = []
        for n in names:
            v = sorted_values[n]
            ranks.append((bisect.bisect_left(v, r["m"][n]) + bisect.bisect_right(v, r["m"][n])) / (2 * len(v)))
        return sum(ranks) / len(ranks)

    return score


HEADER = (
    "| measure | threshold | abstained | precision | recall | answerable refused | F1 on answerable (refused = 0) |\n"
    "|---|---|---|---|---|---|---|"
)


def row(measure: str, t: dict | None) -> str:
    if t is None:
        return f"| {measure} | none reaches the precision | | | | | |"
    precision = "–" if math.isnan(t["precision"]) else f"{t['precision']:.2f}"
    f1 = "–" if t["f1_before"] is None else f"{t['f1_before']:.1f} → {t['f1_after']:.1f}"
    return (
        f"| {measure} | {t['threshold']:.3f} | {t['abstained']} | {precision} | {t['recall']:.2f} | "
        f"{t['answerable_refused']} | {f1} |"
    )


def per_document(results: list[dict], measure: str) -> str:
    by_doc: dict[str, list[dict]] = {}
    for r in results:
        by_doc.setdefault(r["document"], []).append(r)
    return ", ".join(f"{d.rsplit('-', 1)[-1]}: {auc(scored(rs, measure)):.2f}" for d, rs in sorted(by_doc.items()))


def test_measures(calib: list[dict], test: list[dict], measures: list[str], args: argparse.Namespace) -> dict:
    """AUCs, the calibrated thresholds and their test; printed as tables, returned as figures."""
    figures: dict = {}
    print("| measure | AUC, calibration | AUC, test (95 % interval) | AUC, both |\n|---|---|---|---|")
    for m in measures:
        a_cal, a_test, a_both = auc(scored(calib, m)), auc(scored(test, m)), auc(scored(calib + test, m))
        low, high = bootstrap(test, m, args.bootstrap)
        figures[m] = {"auc_calibration": a_cal, "auc_test": a_test, "auc_test_95": [low, high], "auc_both": a_both}
        print(f"| {m} | {a_cal:.3f} | {a_test:.3f} ({low:.2f}-{high:.2f}) | {a_both:.3f} |")
    print(f"\nThresholds chosen on the calibration run (precision ≥ {args.min_precision:.2f}):\n\n{HEADER}")
    for m in measures:
        figures[m]["chosen"] = Sweep(calib, m).choose(args.min_precision, args.min_abstentions)
        print(row(m, figures[m]["chosen"]))
    print(f"\nThe same thresholds on the test run:\n\n{HEADER}")
    for m in measures:
        chosen = figures[m]["chosen"]
        figures[m]["test"] = Sweep(test, m).at(chosen["threshold"]) if chosen else None
        print(row(m, figures[m]["test"]))
    return figures


def combine(calib: list[dict], test: list[dict], figures: dict, args: argparse.Namespace) -> dict:
    """Fits the combinations of the best document measures on the calibration run; adds them as measures."""
    best = sorted(DOCUMENT_MEASURES, key=lambda m: -figures[m]["auc_calibration"])[:COMBINED]
    model = fit_logistic(calib, best)
    ranked = percentile_mean(calib, best)
    for r in calib + test:
        r["m"]["logistic"] = apply_logistic(model, r)
        r["m"]["percentile_mean"] = ranked(r)
    weights = ", ".join(f"{n} {w:+.2f}" for n, w in zip(best, model["weights"], strict=True))
    print(f"\nCombinations of the {COMBINED} measures of highest calibration AUC ({', '.join(best)}), fitted on")
    print(f"the calibration run: logistic regression on standardised measures (weights {weights}; bias")
    print(f"{model['bias']:+.2f}), and the mean of their calibration percentiles.\n")
    out = test_measures(calib, test, ["logistic", "percentile_mean"], args)
    out["logistic"]["model"] = model
    return out


def report(route: str, calib: list[dict], test: list[dict], args: argparse.Namespace) -> dict:
    print(f"\n## route {route}\n")
    for name, rs in (("calibration", calib), ("test", test)):
        unanswerable = sum(not answerable(r) for r in rs)
        print(f"{name}: {len(rs) - unanswerable} answerable, {unanswerable} unanswerable")
    print()
    figures = test_measures(calib, test, MEASURES, args)
    figures.update(combine(calib, test, figures, args))
    top = max(DOCUMENT_MEASURES, key=lambda m: figures[m]["auc_calibration"])
    print(f"\nAUC of {top} per document, calibration: {per_document(calib, top)}")
    print(f"AUC of {top} per document, test: {per_document(test, top)}")
    return {"route": route, "measures": figures}


def every_question(questions: dict, articles: dict, calib_docs: set, test_docs: set, args) -> dict:
    """The question measures on every question of the calibration and test articles."""
    rows: dict[str, list[dict]] = {"calibration": [], "test": []}
    for q in questions.values():
        if q["kind"] not in ("extractive", "unanswerable"):
            continue
        split = "calibration" if q["document"] in calib_docs else "test" if q["document"] in test_docs else None
        if split:
            m = question_measures(articles[q["document"]], q["question"])
            rows[split].append({"kind": q["kind"], "document": q["document"], "m": m})
    print("\n## every question of the calibration and test articles (question measures only)\n")
    for name, rs in rows.items():
        unanswerable = sum(not answerable(r) for r in rs)
        print(f"{name}: {len(rs) - unanswerable} answerable, {unanswerable} unanswerable")
    print("\nThere are no answers here, so no F1.\n")
    return test_measures(rows["calibration"], rows["test"], QUESTION_MEASURES + REFERENCE_ONLY, args)


def finite(value):
    """`value` with NaN (an undefined precision or AUC) as null, so the JSON is strict."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calibrate", type=Path, required=True, help="docqa eval run to choose the thresholds on")
    parser.add_argument("--test", type=Path, required=True, help="docqa eval run to test them on")
    parser.add_argument("--dataset", type=Path, required=True, help="the SQuAD 2.0 style JSONL the runs asked")
    parser.add_argument("--routes", default="rag,long", help="routes to analyse, comma-separated")
    parser.add_argument("--min-precision", type=float, default=2 / 3)
    parser.add_argument("--min-abstentions", type=int, default=10)
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for the AUC interval")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    questions, articles = load_dataset(args.dataset)
    cache: dict = {}
    calib = load_run(args.calibrate, questions, articles, cache)
    test = load_run(args.test, questions, articles, cache)
    print("# Document measures of abstention\n")
    print(f"calibration run: {args.calibrate}; test run: {args.test}; dataset: {args.dataset}")
    print("\nAUC: the chance that an answerable question gets a higher support than an unanswerable one (0.5 is")
    print("chance). Every measure is a support: counts of missing words are negated. `q_negated` (the question")
    print("holds a negation) is how SQuAD 2.0's writers made many questions unanswerable, not something the")
    print("document says: it is shown for reference and never chosen or combined.")
    figures = []
    for route in args.routes.split(","):
        on_route = [r for r in calib if r["route_requested"] == route]
        figures.append(report(route, on_route, [r for r in test if r["route_requested"] == route], args))
    calib_docs = {r["document"] for r in calib}
    test_docs = {r["document"] for r in test}
    everything = every_question(questions, articles, calib_docs, test_docs, args)
    if args.json:
        payload = {"routes": figures, "every_question": everything}
        args.json.write_text(json.dumps(finite(payload), indent=1) + "\n")


if __name__ == "__main__":
    main()
