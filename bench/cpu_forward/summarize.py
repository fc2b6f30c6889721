#!/usr/bin/env python3
"""Turns the JSON lines of hotpass_bench_cpu_forward into bench/cpu_forward/RESULTS.md: per figure
the median over repetitions and the spread (min-max), the roofline it is held against, and the
peers (reference pass, OpenBLAS on an f32 copy of the weights)."""
import argparse
import json
import statistics
from collections import defaultdict


def load(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    return rows


def stat(values):
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def fmt(s, digits=1):
    if s is None:
        return "n/a"
    med, lo, hi = s
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--date")
    parser.add_argument("--machine")
    parser.add_argument("--commit")
    parser.add_argument("--load")
    parser.add_argument("--reps")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    print("# CPU forward pass: baseline benchmark\n")
    print(f"- date: {args.date}\n- machine: {args.machine}\n- commit: {args.commit}")
    print(f"- host load average at the end: {args.load} (the host is shared; figures are medians of {args.reps} "
          "alternating repetitions, spread = min–max)")
    print("- command: `bench/cpu_forward/run.sh` (driver: bench/cpu_forward/bench_forward.cpp)\n")
    for path in args.files:
        rows = load(path)
        model = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
        series = defaultdict(list)
        for r in rows:
            series[(r["what"], r["forward"], r["threads"], r["tokens"])].append(r["value"])
        bytes_per_token = series[("bytes_per_token", "", 0, 1)][0]
        flops_per_token = series[("flops_per_token", "", 0, 1)][0]
        print(f"## {model}\n")
        print(f"{bytes_per_token / 1e6:.1f} MB of weights read per decoded token; {flops_per_token / 1e6:.1f} MFLOP of matmuls per token.\n")
        print("| threads | read bandwidth GB/s (the ceiling: best of the two) | 4 KiB pages | huge pages | f32 FMA peak GFLOP/s | bf16 dot peak GFLOP/s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for t in (1, 2):
            print(f"| {t} | {fmt(stat(series[('read_bandwidth', '', t, 0)]))} | {fmt(stat(series[('read_bandwidth_4k', '', t, 0)]))} | "
                  f"{fmt(stat(series[('read_bandwidth_huge', '', t, 0)]))} | {fmt(stat(series[('fma_peak_f32', '', t, 0)]))} | "
                  f"{fmt(stat(series[('fma_peak_bf16', '', t, 0)]))} |")
        print()
        print("| figure | threads | baseline tokens/s | ceiling tokens/s | baseline / ceiling | OpenBLAS f32 tokens/s | baseline / OpenBLAS |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for t in (1, 2):
            bw = stat(series[("read_bandwidth", "", t, 0)])
            peak = stat(series[("fma_peak_f32", "", t, 0)])
            for b in (1, 4, 16):
                base = stat(series[("decode", "baseline", t, b)])
                blas = stat(series[("decode", "openblas", t, b)])
                ceiling = bw[0] * 1e9 / bytes_per_token * (b if b > 1 else 1) if b == 1 else None
                if b > 1:  # bandwidth bound until compute bound: weights are read once per step
                    ceiling = min(bw[0] * 1e9 / bytes_per_token * b, peak[0] * 1e9 / flops_per_token)
                ratio = f"{base[0] / ceiling:.0%}" if base and ceiling else "n/a"
                vs = f"{base[0] / blas[0]:.2f}x" if base and blas else "n/a"
                print(f"| decode batch {b} | {t} | {fmt(base)} | {ceiling:.1f} | {ratio} | {fmt(blas)} | {vs} |")
            for n in (128, 512):
                base = stat(series[("prefill", "baseline", t, n)])
                blas = stat(series[("prefill", "openblas", t, n)])
                ceiling = peak[0] * 1e9 / flops_per_token
                ratio = f"{base[0] / ceiling:.0%}" if base else "n/a"
                vs = f"{base[0] / blas[0]:.2f}x" if base and blas else "n/a"
                print(f"| prefill {n} | {t} | {fmt(base)} | {ceiling:.1f} | {ratio} | {fmt(blas)} | {vs} |")
        ref_rows = []
        for b in (1, 4, 16):
            ref = stat(series[("decode", "reference", 1, b)])
            base = stat(series[("decode", "baseline", 1, b)])
            if not ref or not base:
                continue
            bw = stat(series[("read_bandwidth", "", 1, 0)])
            peak = stat(series[("fma_peak_f32", "", 1, 0)])
            ceiling = min(bw[0] * 1e9 / bytes_per_token * b, peak[0] * 1e9 / flops_per_token)
            ref_rows.append(f"| decode batch {b} | {fmt(ref, 2)} | {fmt(base)} | {base[0] / ref[0]:.1f}x | {ceiling / ref[0]:.1f}x |")
        if ref_rows:
            n_ref = len(series[("decode", "reference", 1, 1)])
            print(f"\nAgainst the reference pass, 1 thread (reference: medians of {n_ref} repetitions, 1-token prompts, "
                  "2 decode steps per batch size; it reads every weight once per token, "
                  "the baseline once per step):\n")
            print("| figure | reference tokens/s | baseline tokens/s | baseline / reference | ceiling / reference |")
            print("| --- | --- | --- | --- | --- |")
            for row in ref_rows:
                print(row)
            print()
        print("Ceilings: decode batch 1 = read bandwidth / bytes per token; decode batch B = min(B x that, f32 FMA peak / "
              "flops per token); prefill = f32 FMA peak / flops per token (the baseline computes in f32). The read bandwidth "
              "of a repetition is the faster of a 1 GiB buffer on 4 KiB pages and one on transparent huge pages (preset "
              "weights are on huge pages). OpenBLAS runs only the matmuls (no attention, norms or MoE) on f32 weights of "
              "the same shapes, also on huge pages.\n")


if __name__ == "__main__":
    main()
