#!/usr/bin/env bash
# A noisy neighbour for the runner-statistics bench: N busy loops (default: one per core) that run
# for ON seconds, then rest OFF seconds, until killed, like builds coming and going beside the
# timing. Usage: bench/executor/noise.sh [N] [ON] [OFF]; stop it with kill -- -PGID (it runs
# its loops in its own process group when started with setsid).
n=${1:-$(nproc)}
on=${2:-0.25}
off=${3:-0.25}
while :; do
  for _ in $(seq "$n"); do timeout "$on" sh -c 'while :; do :; done' & done
  wait
  sleep "$off"
done
