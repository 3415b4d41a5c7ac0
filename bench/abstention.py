#!/usr/bin/env python3
"""Calibrate docqa's abstention threshold on one evaluation run and test it on another.

Both runs are ``docqa eval`` output directories (or their ``results.jsonl``) over SQuAD 2.0 style data, asked
with ``--abstention-threshold 1e-9`` (``0`` before answers were measured only under a threshold) so that no
answer was changed. Each result keeps the abstention check of its
first generation (``abstention[0].measures``: the measures docqa computes from the engine's top-20
log-probabilities). For each route this prints:

- how well each measure separates answerable from unanswerable questions on each run and on both together
  (AUC: the chance that an answerable question's answer gets a higher support than an unanswerable one's);
- per run: the deciding measure's AUC per document, the answers' commonest first words, how often the refusal's
  first token was among the 20 most likely at the first step, and the precision and recall of abstaining
  below a range of thresholds of the measure docqa decides with;
- the threshold chosen there: the one with the highest abstention recall whose precision is at least
  ``--min-precision`` over at least ``--min-abstentions`` abstentions;
- on the test run, the same AUCs, then the chosen threshold's abstention precision and recall and the change
  in mean F1 over answerable questions, counting an abstained answer as 0 (docqa's own run with the threshold
  scores the refusal text itself, which can share a word such as "in" with a gold answer, so its F1 comes out
  slightly higher).

With ``--applied RUN_C`` (a run made with the chosen threshold in force), it also summarises what the check did
there: abstentions per route, and under ``auto`` the Self-Route fallbacks it caused.

Run: python3 bench/abstention.py --calibrate RUN_A --test RUN_B [--routes rag,long] [--applied RUN_C]
     [--json OUT.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

# Each measure as a support: higher means the answer is more likely supported.
SUPPORTS = {
    "first_token_probability": lambda m: m["first_token_probability"],
    "head_logprob": lambda m: m["head_logprob"],
    "mean_logprob": lambda m: m["mean_logprob"],
    "min_logprob": lambda m: m["min_logprob"],
    "refusal_probability": lambda m: -m["refusal_probability"],
}
# The measure docqa compares with --abstention-threshold (services/src/qa/abstention.rs, `support`).
DECIDING = "first_token_probability"


def load(path: Path) -> list[dict]:
    """The answered extractive and unanswerable results of a run that carry an abstention check."""
    file = path / "results.jsonl" if path.is_dir() else path
    results = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return [
        r
        for r in results
        if r.get("error") is None and r.get("abstention") and r["kind"] in ("extractive", "unanswerable")
    ]


def auc(answerable: list[float], unanswerable: list[float]) -> float:
    """P(support of an answerable question > that of an unanswerable one), ties counting half."""
    pairs = len(answerable) * len(unanswerable)
    if pairs == 0:
        return math.nan
    wins = sum(1.0 if a > u else 0.5 if a == u else 0.0 for a in answerable for u in unanswerable)
    return wins / pairs


def supports(results: list[dict], name: str) -> list[tuple[float, dict]]:
    """(support, result) for each result, from its first check's measures."""
    return [(SUPPORTS[name](r["abstention"][0]["measures"]), r) for r in results]


def aucs(results: list[dict]) -> dict[str, float]:
    """The AUC of each measure."""
    out = {}
    for name in SUPPORTS:
        scored = supports(results, name)
        out[name] = auc(
            [s for s, r in scored if r["kind"] != "unanswerable"],
            [s for s, r in scored if r["kind"] == "unanswerable"],
        )
    return out


def at_threshold(results: list[dict], threshold: float) -> dict:
    """Abstaining below `threshold` on the deciding measure: precision, recall, and the F1 change."""
    scored = supports(results, DECIDING)
    abstained = [r for s, r in scored if s < threshold]
    unanswerable = [r for r in results if r["kind"] == "unanswerable"]
    answerable = [r for r in results if r["kind"] != "unanswerable"]
    right = sum(r["kind"] == "unanswerable" for r in abstained)
    f1_before = sum(r["f1"] or 0.0 for r in answerable) / max(1, len(answerable))
    lost = sum(r["f1"] or 0.0 for r in abstained if r["kind"] != "unanswerable")
    return {
        "threshold": threshold,
        "abstained": len(abstained),
        "precision": right / len(abstained) if abstained else math.nan,
        "recall": right / max(1, len(unanswerable)),
        "answerable_refused": len(abstained) - right,
        "f1_before": 100 * f1_before,
        "f1_after": 100 * (f1_before - lost / max(1, len(answerable))),
    }


def candidate_thresholds(results: list[dict]) -> list[float]:
    """Midpoints between consecutive distinct supports, rounded to 3 decimals."""
    values = sorted({s for s, _ in supports(results, DECIDING)})
    return sorted({round((a + b) / 2, 3) for a, b in itertools.pairwise(values)})


def choose(results: list[dict], min_precision: float, min_abstentions: int) -> dict | None:
    """The threshold of highest recall whose precision reaches `min_precision`."""
    ok = [
        t
        for t in (at_threshold(results, x) for x in candidate_thresholds(results))
        if t["abstained"] >= min_abstentions and t["precision"] >= min_precision
    ]
    return max(ok, key=lambda t: (t["recall"], -t["threshold"]), default=None)


def row(t: dict) -> str:
    return (
        f"| {t['threshold']:.3f} | {t['abstained']} | {t['precision']:.2f} | {t['recall']:.2f} | "
        f"{t['answerable_refused']} | {t['f1_before']:.1f} → {t['f1_after']:.1f} |"
    )


HEADER = (
    "| threshold | abstained | precision | recall | answerable refused | F1 on answerable (refused = 0) |\n"
    "|---|---|---|---|---|---|"
)


def describe(name: str, results: list[dict]) -> None:
    """Per document, the deciding measure's AUC; the answers' first words; how often a refusal was likely."""
    by_doc: dict[str, list[dict]] = {}
    for r in results:
        by_doc.setdefault(r["document"], []).append(r)
    per_doc = ", ".join(f"{doc.rsplit('-', 1)[-1]}: {aucs(rs)[DECIDING]:.2f}" for doc, rs in sorted(by_doc.items()))
    first_words: dict[str, int] = {}
    for r in results:
        word = (r["answer"].split() or [""])[0]
        first_words[word] = first_words.get(word, 0) + 1
    common = sorted(first_words.items(), key=lambda kv: -kv[1])[:3]
    likely = sum(r["abstention"][0]["measures"]["refusal_probability"] > 0 for r in results)
    print(f"\n{name}, AUC of {DECIDING} per document: {per_doc}")
    print(f"{name}, the answers' commonest first words: {', '.join(f'{w!r} {n}' for w, n in common)}")
    print(f"{name}, answers whose first step had the refusal among its 20 most likely tokens: {likely}")


def applied(path: Path) -> None:
    """A run made with the threshold in force: abstentions per route, and what Self-Route did."""
    results = load(path)
    print(f"\n## with the threshold in force: {path}\n")
    print("| route | abstained | precision | recall | Self-Route fallbacks | of those, refused | routes taken |")
    print("|---|---|---|---|---|---|---|")
    for route in sorted({r["route_requested"] for r in results}):
        rs = [r for r in results if r["route_requested"] == route]
        refused = [r for r in rs if not r["answerable"]]
        right = sum(r["kind"] == "unanswerable" for r in refused)
        unanswerable = sum(r["kind"] == "unanswerable" for r in rs)
        fallbacks = [r for r in rs if r["self_route_fallback"]]
        taken: dict[str, int] = {}
        for r in rs:
            taken[r["route"]] = taken.get(r["route"], 0) + 1
        print(
            f"| {route} | {len(refused)} of {len(rs)} | {right / max(1, len(refused)):.2f} | "
            f"{right / max(1, unanswerable):.2f} | {len(fallbacks)} | {sum(not r['answerable'] for r in fallbacks)} | "
            f"{', '.join(f'{k} {n}' for k, n in sorted(taken.items()))} |"
        )


def report(route: str, calib: list[dict], test: list[dict], args: argparse.Namespace) -> dict:
    """Prints one route's calibration and test; returns its figures."""
    print(f"\n## route {route}\n")
    for name, rs in (("calibration", calib), ("test", test)):
        unanswerable = sum(r["kind"] == "unanswerable" for r in rs)
        print(f"{name}: {len(rs) - unanswerable} answerable, {unanswerable} unanswerable")
    print()
    a_cal, a_test, a_both = aucs(calib), aucs(test), aucs(calib + test)
    print("| measure | AUC, calibration | AUC, test | AUC, both |\n|---|---|---|---|")
    for name in SUPPORTS:
        print(f"| {name} | {a_cal[name]:.3f} | {a_test[name]:.3f} | {a_both[name]:.3f} |")
    for name, rs in (("calibration", calib), ("test", test)):
        describe(name, rs)
        print(f"\n{name.capitalize()}, abstaining below thresholds of {DECIDING}:\n\n{HEADER}")
        grid = candidate_thresholds(rs)
        for x in grid[:: max(1, len(grid) // 12)]:
            print(row(at_threshold(rs, x)))
    chosen = choose(calib, args.min_precision, args.min_abstentions)
    out = {"route": route, "auc_calibration": a_cal, "auc_test": a_test, "chosen": chosen}
    if chosen is None:
        print(f"\nNo threshold reaches precision {args.min_precision:.2f} on the calibration run.")
        return out
    print(f"\nChosen on the calibration run (precision ≥ {args.min_precision:.2f}):\n\n{HEADER}\n{row(chosen)}")
    held = at_threshold(test, chosen["threshold"])
    out["test"] = held
    print(f"\nThe same threshold on the test run:\n\n{HEADER}\n{row(held)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calibrate", type=Path, required=True, help="docqa eval run to choose the threshold on")
    parser.add_argument("--test", type=Path, required=True, help="docqa eval run to test it on")
    parser.add_argument("--routes", default="rag", help="routes to analyse, comma-separated")
    parser.add_argument("--min-precision", type=float, default=2 / 3)
    parser.add_argument("--min-abstentions", type=int, default=10)
    parser.add_argument("--applied", type=Path, help="a run made with the chosen threshold in force, to summarise")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    calib, test = load(args.calibrate), load(args.test)
    figures = []
    for route in args.routes.split(","):
        on_route = [r for r in calib if r["route_requested"] == route]
        figures.append(report(route, on_route, [r for r in test if r["route_requested"] == route], args))
    if args.applied:
        applied(args.applied)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
