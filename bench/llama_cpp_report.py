#!/usr/bin/env python3
"""Summarise llama-bench JSON runs (from ``bench/llama_cpp.sh``) as a table and one JSON file.

Each llama-bench record becomes one row: model format, test name (``pp<N>`` prefill, ``tg<N>@d<D>``
decode after a D-token prompt), tokens/s mean and standard deviation over the repetitions.
Run: python3 bench/llama_cpp_report.py RUN.json [RUN.json ...] [--threads N] [--out SUMMARY.json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def test_name(record: dict) -> str:
    """``pp512`` for prefill, ``tg128@d512`` for decode after 512 tokens of context."""
    if record["n_gen"] == 0:
        name = f"pp{record['n_prompt']}"
    elif record["n_prompt"] == 0:
        name = f"tg{record['n_gen']}"
    else:
        name = f"pp{record['n_prompt']}+tg{record['n_gen']}"
    return f"{name}@d{record['n_depth']}" if record.get("n_depth") else name


def model_format(record: dict) -> str:
    """Weight format from the model file name (``...Instruct.BF16.gguf`` -> ``BF16``)."""
    match = re.search(r"\.([A-Za-z0-9_]+)\.gguf$", record["model_filename"])
    return match.group(1) if match else record["model_type"]


def summarise(records: list[dict]) -> list[dict]:
    """One summary row per llama-bench record."""
    return [
        {
            "model": model_format(r),
            "test": test_name(r),
            "tok_s_mean": r["avg_ts"],
            "tok_s_sd": r["stddev_ts"],
            "repetitions": len(r.get("samples_ts", [])),
            "n_threads": r["n_threads"],
            "flash_attn": r.get("flash_attn"),
            "model_type": r["model_type"],
        }
        for r in records
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="llama-bench -o json outputs")
    parser.add_argument("--threads", type=int, default=None, help="threads requested (for the record)")
    parser.add_argument("--out", type=Path, default=None, help="summary JSON to write")
    args = parser.parse_args()
    records = [r for path in args.runs for r in json.loads(path.read_text())]
    rows = summarise(records)
    print(f"{'model':<6} {'test':<12} {'tok/s':>18}")
    for row in rows:
        print(f"{row['model']:<6} {row['test']:<12} {row['tok_s_mean']:>9.1f} ± {row['tok_s_sd']:<7.1f}")
    if args.out:
        first = records[0] if records else {}
        summary = {
            "tool": "llama-bench",
            "build_commit": first.get("build_commit"),
            "build_number": first.get("build_number"),
            "cpu_info": first.get("cpu_info"),
            "threads": args.threads,
            "rows": rows,
            "raw": records,
        }
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
