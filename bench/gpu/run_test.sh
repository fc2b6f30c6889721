#!/usr/bin/env bash
# Runs one staged GPU test binary with a time limit; at the limit it gets SIGUSR1 first, which with
# lib/libhotpass_stall_backtrace.so of the stage preloaded (bench/gpu/stall_backtrace.cpp) makes its main
# thread write its backtrace to stderr; 10 s later it is killed. Exit status as timeout(1)'s: 124 or 137
# when the limit was reached. Used by tools/gpu-check.sh and bench/gpu/ab_decode.sh.
#
# usage: bench/gpu/run_test.sh STAGE SECONDS BINARY [ARGS...]
set -uo pipefail
stage=$1 limit=$2
shift 2
preload=()
[ -f "$stage/lib/libhotpass_stall_backtrace.so" ] && preload=(env "LD_PRELOAD=$stage/lib/libhotpass_stall_backtrace.so")
exec timeout -s USR1 -k 10 "$limit" "${preload[@]}" "$@"
