#!/usr/bin/env python3
"""Validate the hf_forward.py oracle against Hugging Face's own outputs.

Each subfolder of the hf root (default: ../shared/models/hf relative to the
repository root) that holds an hf_reference.json -- {"prompts": [{"tokens",
"logits", "greedy"}]} computed by transformers in float32 -- is run through
hf_forward.py, which is written from HF's modelling code and deliberately
independent of the C++ code.  For every prompt the check requires

    max|logits - ref| <= REL_TOL * max|ref|   and   greedy tokens equal.

Usage: python3 self_check.py [HF_ROOT] [--rel-tol T]
Exit codes: 0 pass, 1 mismatch (or a required model folder missing),
77 skipped (torch not importable, or HF_ROOT absent).
"""

import argparse
import json
import os
import sys

# Measured with torch 1.13 on CPU: worst relative delta about 2.3e-6
# (llama_gqa, 33-token prompt).
REL_TOL = 1e-5
EXPECTED_MODELS = ("llama_gqa", "mixtral", "qwen3_moe")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_HF_ROOT = os.path.join(REPO_ROOT, "..", "shared", "models", "hf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_root", nargs="?", default=DEFAULT_HF_ROOT,
                    help="folder of HF checkpoints with hf_reference.json (default: %(default)s)")
    ap.add_argument("--rel-tol", type=float, default=REL_TOL)
    args = ap.parse_args()

    try:
        import torch
    except ImportError as e:
        print("self_check: skipped, torch is not importable (%s)" % e)
        return 77
    sys.path.insert(0, HERE)
    import hf_forward

    root = os.path.abspath(args.hf_root)
    if not os.path.isdir(root):
        print("self_check: skipped, no HF reference folder at %s" % root)
        return 77
    models = sorted(d for d in os.listdir(root)
                    if os.path.exists(os.path.join(root, d, "hf_reference.json")))
    failed = False
    for name in EXPECTED_MODELS:
        if name not in models:
            print("FAIL %s: missing %s/hf_reference.json" % (name, os.path.join(root, name)))
            failed = True

    torch.set_grad_enabled(False)
    for name in models:
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "hf_reference.json")) as f:
            reference = json.load(f)
        try:
            model = hf_forward.CausalLM(folder)
        except hf_forward.Unsupported as e:
            print("FAIL %s: %s" % (name, e))
            failed = True
            continue
        worst_abs, worst_rel = 0.0, 0.0
        for k, prompt in enumerate(reference["prompts"]):
            ref = torch.tensor(prompt["logits"], dtype=torch.float32)
            logits = model.forward(prompt["tokens"])
            if tuple(logits.shape) != tuple(ref.shape):
                print("FAIL %s prompt %d: logits shape %s, reference %s"
                      % (name, k, tuple(logits.shape), tuple(ref.shape)))
                failed = True
                continue
            delta = float((logits - ref).abs().max())
            scale = float(ref.abs().max())
            rel = delta / scale if scale > 0 else delta
            worst_abs, worst_rel = max(worst_abs, delta), max(worst_rel, rel)
            ok = delta <= args.rel_tol * scale
            greedy_ref = prompt.get("greedy")
            greedy = model.greedy(prompt["tokens"], len(greedy_ref)) if greedy_ref else []
            greedy_ok = greedy == (greedy_ref or [])
            print("%s %s prompt %d (%d tokens): max|dlogits| %.3e, max|ref| %.3f, rel %.3e, greedy %s"
                  % ("ok  " if ok and greedy_ok else "FAIL", name, k, len(prompt["tokens"]),
                     delta, scale, rel, "equal" if greedy_ok else "DIFFERS %s vs %s" % (greedy, greedy_ref)))
            failed |= not (ok and greedy_ok)
        print("%s: worst max|dlogits| %.3e (relative %.3e, tolerance %.1e)"
              % (name, worst_abs, worst_rel, args.rel_tol))

    print("self_check: %s" % ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
