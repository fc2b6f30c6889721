#!/usr/bin/env python3
"""Writes bench/gpu/RESULTS.md from the JSON of hotpass_bench_gpu_decode and hf_peer.py, and prints
the short table that tools/gpu-check.sh shows last.
usage: write_results.py BENCH_JSON PEER_JSON OUT_MD --machine TEXT --commit SHA [--tests TEXT]"""
import argparse
import datetime
import json


def timeline_section(bench):
    """The `--timeline` tables (CUPTI kernel records of graph replays), one per batch that has one."""
    traced = [b for b in bench["batches"] if b.get("timeline")]
    if not traced:
        return []
    lines = ["", f"### The step's kernels as they ran (`--timeline`, {bench['preset']})", "",
             "CUPTI's start and end of every kernel in 20 graph replays. *Exposed*: how far a kernel pushed the step's end past "
             "every kernel that started before it (the exposed times of a replay add up to its span; a gap before a kernel "
             "counts in its exposed time); *lead*: how long before that front it started (programmatic launch; negative: "
             "a gap). Tracing adds to the step: compare the span with the untraced step.", ""]
    for b in traced:
        t = b["timeline"]
        if "error" in t:
            lines += [f"batch {b['batch']}: not traced: {t['error']}", ""]
            continue
        lines += [f"batch {b['batch']}: span {t['span_ms_median']:.3f} ms traced (min {t['span_ms_min']:.3f}, max {t['span_ms_max']:.3f}), "
                  f"{b['step_ms_median']:.3f} untraced; no kernel running {t['gap_ms']:.3f} ms; roofline {b['roofline_ms']:.3f} ms", "",
                  "| kernel (grid) | launches | exposed ms per step | share | mean us per launch | mean lead us |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for k in t["kinds"]:
            lines.append(f"| `{k['kernel']}` | {k['launches']} | {k['exposed_ms']:.4f} | {100 * k['exposed_ms'] / t['span_ms_mean']:.0f}% | "
                         f"{k['mean_us']:.2f} | {k['mean_lead_us']:.2f} |")
        lines.append("")
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bench")
    parser.add_argument("peer")
    parser.add_argument("out")
    parser.add_argument("--machine", default="?")
    parser.add_argument("--commit", default="?")
    parser.add_argument("--tests", default="")
    parser.add_argument("--moe", default="", help="a second bench JSON (an MoE preset), shown without a peer")
    args = parser.parse_args()
    bench = json.load(open(args.bench))
    try:
        peer = json.load(open(args.peer))
    except (OSError, ValueError):
        peer = {"batches": [], "version": "not run"}
    peer_by_batch = {b["batch"]: b for b in peer["batches"]}
    s = bench["startup_ms"]
    lines = [
        "# GPU decode figures (bench/gpu)",
        "",
        f"- date: {datetime.date.today().isoformat()}; machine: {args.machine}; commit: {args.commit}",
        f"- model: `preset:{bench['preset']}` (weights generated on the device), forward `{bench['forward']}`, "
        f"KV {bench['kv_length']} positions per sequence ({bench['kv_dtype']}), block 16 tokens",
        f"- device-to-device copy bandwidth measured in the same run: {bench['copy_bandwidth_gbs']:.0f} GB/s (bytes read + written)",
        f"- roofline: (weight bytes {bench['weight_bytes_per_step'] / 1e9:.3f} GB + batch x KV bytes) / copy bandwidth",
        f"- start -> ready: {s['total']:.0f} ms (context {s['context']:.0f}, weights {s['weights']:.0f}, KV {s['kv']:.0f}, "
        f"plugin create {s['plugin']:.0f}, warm-up step {s['warm_up']:.0f}); graph capture is per batch size, in the bench",
        f"- hotpass: one CUDA graph per step, {bench['batches'][0]['reps']} replays timed with events (median, p10-p90); "
        "peer: transformers " + str(peer.get("version")) + f" ({peer.get('attn_implementation', '?')} attention, DynamicCache, "
        "host clock around a synchronize, median of 20 steps); torch graph: the same weights in a decode step of plain "
        "PyTorch ops (cuBLAS projections with q/k/v and gate/up concatenated, SDPA over a static KV cache) captured in one "
        "CUDA graph, replays timed with events (median); its logits checked against the transformers model's "
        "(max |delta| / max |logit| in the last column)",
        "",
        "| batch | hotpass step ms (p10-p90) | hotpass tokens/s | roofline ms | % of roofline | eager step ms | graph capture ms | transformers step ms | transformers tokens/s | torch graph step ms (p10-p90) | torch graph tokens/s | hotpass / torch graph | torch graph logits delta |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    table = ["batch  hotpass tok/s  %roofline  transformers tok/s  speedup  torch graph tok/s  speedup"]
    for b in bench["batches"]:
        p = peer_by_batch.get(b["batch"])
        p_ms = f"{p['step_ms_median']:.2f}" if p else "-"
        p_tps = f"{p['tokens_per_s']:.0f}" if p else "-"
        speedup = f"{b['tokens_per_s'] / p['tokens_per_s']:.1f}x" if p else "-"
        g = p.get("torch_graph") if p else None
        g_ms = f"{g['step_ms_median']:.3f} ({g['step_ms_p10']:.3f}-{g['step_ms_p90']:.3f})" if g else "-"
        g_tps = f"{g['tokens_per_s']:.0f}" if g else "-"
        g_speedup = f"{b['tokens_per_s'] / g['tokens_per_s']:.2f}x" if g else "-"
        g_delta = f"{g['max_rel_delta_vs_transformers']:.1e}" if g else "-"
        lines.append(f"| {b['batch']} | {b['step_ms_median']:.3f} ({b['step_ms_p10']:.3f}-{b['step_ms_p90']:.3f}) | {b['tokens_per_s']:.0f} | "
                     f"{b['roofline_ms']:.3f} | {100 * b['fraction_of_roofline']:.0f}% | {b['eager_step_ms_median']:.3f} | {b.get('capture_ms', 0):.1f} | {p_ms} | {p_tps} | "
                     f"{g_ms} | {g_tps} | {g_speedup} | {g_delta} |")
        table.append(f"{b['batch']:>5}  {b['tokens_per_s']:>13.0f}  {100 * b['fraction_of_roofline']:>8.0f}%  {p_tps:>18}  {speedup:>7}  {g_tps:>17}  {g_speedup:>7}")
    with_kernels = [b for b in bench["batches"] if b.get("kernels")]
    if with_kernels:
        lines += ["", "### Where the step's time goes (`--breakdown`)", "",
                  "Each kind of kernel (same kernel, same grid) of the captured step re-launched alone as a graph of its launches in "
                  "step order, timed with events (median of 20); the sum against the step shows what launches and tails between "
                  "kernels cost.", ""]
        for b in with_kernels:
            total = sum(k["ms"] for k in b["kernels"])
            lines += [f"batch {b['batch']}: kernels alone {total:.3f} ms, step {b['step_ms_median']:.3f} ms, "
                      f"roofline {b['roofline_ms']:.3f} ms", "",
                      "| kernel (grid) | launches | ms per step | share |", "| --- | --- | --- | --- |"]
            for k in sorted(b["kernels"], key=lambda k: -k["ms"]):
                lines.append(f"| `{k['kernel']}` | {k['launches']} | {k['ms']:.4f} | {100 * k['ms'] / b['step_ms_median']:.0f}% |")
            lines.append("")
    lines += timeline_section(bench)
    if args.moe:
        moe = json.load(open(args.moe))
        m = moe["startup_ms"]
        lines += ["", f"### `preset:{moe['preset']}` (weights generated on the device), forward `{moe['forward']}`, KV {moe['kv_length']}",
                  "",
                  f"start -> ready {m['total']:.0f} ms (context {m['context']:.0f}, weights {m['weights']:.0f}, KV {m['kv']:.0f}, "
                  f"plugin create {m['plugin']:.0f}, warm-up {m['warm_up']:.0f}). The roofline counts the bytes the step reads: "
                  "attention, router and lm_head weights once, each expert the routing touched once per layer, and the KV.",
                  "",
                  "| batch | step ms (p10-p90) | tokens/s | experts read per layer | roofline ms | % of roofline | one-token roofline ms | eager step ms |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for b in moe["batches"]:
            lines.append(f"| {b['batch']} | {b['step_ms_median']:.3f} ({b['step_ms_p10']:.3f}-{b['step_ms_p90']:.3f}) | {b['tokens_per_s']:.0f} | "
                         f"{b.get('unique_experts_per_layer', 0):.1f} | {b['roofline_ms']:.3f} | {100 * b['fraction_of_roofline']:.0f}% | "
                         f"{b.get('roofline_one_token_ms', b['roofline_ms']):.3f} | {b['eager_step_ms_median']:.3f} |")
            table.append(f"{moe['preset']} batch {b['batch']}: {b['tokens_per_s']:.0f} tokens/s")
        lines += timeline_section(moe)
    if args.tests:
        lines += ["", f"GPU tests in the same call: {args.tests}"]
    lines.append("")
    open(args.out, "w").write("\n".join(lines))
    print("\n".join(table))


if __name__ == "__main__":
    main()
