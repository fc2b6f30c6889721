#!/usr/bin/env python3
"""Compare two logits files, e.g. hotpass's output with the hf_forward.py oracle.

Each file is JSON: either {"logits": [[...], ...], "greedy": [...]} (greedy
optional) or a bare [[...], ...] list of per-position logits (as written by
`hotpass generate --logits FILE`).  B is the reference.  Passes when

    max|A - B| <= rel_tol * max|B|   and, when both files have one, the greedy lists are equal.

Part of the independent torch oracle (written from HF's modelling code, no code
shared with the C++ project); needs only the Python standard library.

Usage: python3 compare_logits.py A.json B.json [--rel-tol 1e-3]
Exit codes: 0 match, 1 mismatch or unreadable/incompatible input.
"""

import argparse
import json
import sys


def load(path):
    """(logits as list of rows, greedy list or None)."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        logits, greedy = data.get("logits"), data.get("greedy")
    else:
        logits, greedy = data, None
    if not isinstance(logits, list) or not all(isinstance(r, list) for r in logits):
        raise ValueError("%s: no 'logits' list of lists" % path)
    return logits, greedy


def main():
    ap = argparse.ArgumentParser(description="Compare logits JSON A against reference B.")
    ap.add_argument("a", help="logits under test (e.g. hotpass output)")
    ap.add_argument("b", help="reference logits (e.g. hf_forward.py output)")
    ap.add_argument("--rel-tol", type=float, default=1e-3,
                    help="pass when max|A-B| <= rel_tol * max|B| (default %(default)s)")
    args = ap.parse_args()

    try:
        a, greedy_a = load(args.a)
        b, greedy_b = load(args.b)
    except (OSError, ValueError) as e:
        print("compare_logits: %s" % e)
        return 1

    if len(a) != len(b) or any(len(ra) != len(rb) for ra, rb in zip(a, b)):
        print("compare_logits: shape mismatch: A has %d rows of %s, B has %d rows of %s"
              % (len(a), sorted({len(r) for r in a}), len(b), sorted({len(r) for r in b})))
        return 1

    max_delta, max_ref, worst = 0.0, 0.0, (0, 0)
    argmax_differs = 0
    for pos, (ra, rb) in enumerate(zip(a, b)):
        for i, (x, y) in enumerate(zip(ra, rb)):
            d = abs(x - y)
            if d > max_delta or d != d:  # NaN counts as the worst delta
                max_delta, worst = d, (pos, i)
            max_ref = max(max_ref, abs(y))
        if ra and max(range(len(ra)), key=ra.__getitem__) != max(range(len(rb)), key=rb.__getitem__):
            argmax_differs += 1

    rel = max_delta / max_ref if max_ref > 0 else max_delta
    ok = max_delta <= args.rel_tol * max_ref  # False for NaN
    print("positions %d, vocab %d" % (len(b), len(b[0]) if b else 0))
    print("max|A-B| = %.6g at position %d, token %d" % (max_delta, worst[0], worst[1]))
    print("max|B|   = %.6g" % max_ref)
    print("relative = %.6g (tolerance %.3g): %s" % (rel, args.rel_tol, "ok" if ok else "FAIL"))
    print("positions whose argmax differs: %d" % argmax_differs)

    if greedy_a is not None and greedy_b is not None:
        same = list(greedy_a) == list(greedy_b)
        print("greedy: %s" % ("equal" if same else "DIFFER\n  A: %s\n  B: %s" % (greedy_a, greedy_b)))
        ok = ok and same
    print("compare_logits: %s" % ("match" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
