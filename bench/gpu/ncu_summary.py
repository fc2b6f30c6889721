#!/usr/bin/env python3
"""One line per launch of an Nsight Compute report exported as CSV (`ncu -i R.ncu-rep --page details
--csv`): kernel, grid x block, duration (us), DRAM and L2 throughput (% of peak), achieved occupancy,
registers, shared-memory block limit, cycles per issued instruction. Used by bench/gpu/ab_decode.sh
(HOTPASS_AB_NCU); a metric the report lacks prints as '-'.

usage: bench/gpu/ncu_summary.py REPORT.csv
"""
import csv
import sys

# Metric name in the report -> column title.
METRICS = {
    "Duration": "us",
    "DRAM Throughput": "dram%",
    "L2 Cache Throughput": "l2%",
    "Achieved Occupancy": "occ%",
    "Registers Per Thread": "regs",
    "Block Limit Shared Mem": "blk/smem",
    "Warp Cycles Per Issued Instruction": "cyc/issue",
}
TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def summarize(path):
    launches = {}
    with open(path, newline="", errors="replace") as handle:
        # ncu prints its own lines (==PROF==, warnings) before the table: start at the header row.
        lines = [line for line in handle]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return f"{path}: no launches (not an ncu --csv --page details export?)"
    for row in csv.DictReader(lines[start:]):
        launch = launches.setdefault(row.get("ID", "?"), {
            "kernel": (row.get("Kernel Name") or "?").split("(")[0][:60],
            "shape": f"{row.get('Grid Size', '?')}x{row.get('Block Size', '?')}".replace(" ", ""),
        })
        name, unit, value = row.get("Metric Name", ""), row.get("Metric Unit", ""), row.get("Metric Value", "")
        if name not in METRICS:
            continue
        if name == "Duration" and number(value) is not None and unit in TO_US:
            value = f"{number(value) * TO_US[unit]:.2f}"
        launch[METRICS[name]] = value
    out = [f"Nsight Compute, {path.rsplit('/', 1)[-1]}: {len(launches)} launches"]
    for launch in launches.values():
        cells = " ".join(f"{title} {launch.get(title, '-')}" for title in METRICS.values())
        out.append(f"  {launch['kernel']} {launch['shape']} {cells}")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(summarize(sys.argv[1]))
