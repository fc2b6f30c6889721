#!/usr/bin/env python3
"""hotpass vs an independent PyTorch oracle on checkpoints `hotpass model init` writes.

For architectures with no Hugging Face-written checkpoint in ../shared/models/hf, this is the
external reference: hf_forward.py (written from transformers' modelling code, sharing nothing
with the C++ code) computes logits and a greedy continuation, and hotpass must agree.

Usage: check_hotpass.py HOTPASS_BINARY [PRESET ...]
Exit: 0 all agree, 1 a mismatch, 77 torch missing (ctest reports a skip).
"""

import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-moe", "tiny-qwen2-moe", "tiny-mixtral"]
N_NEW = 8
REL_TOL = 1e-3


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        sys.exit(1)
    return proc.stdout


def check(hotpass, preset, extra_init, workdir):
    model_dir = os.path.join(workdir, preset + "".join(extra_init).replace("-", "_"))
    run([hotpass, "model", "init", "--preset", preset, "--out", model_dir, "--seed", "5",
         "--bias-std", "0.05", "--norm-std", "0.1", "--force"] + extra_init)
    config = json.load(open(os.path.join(model_dir, "config.json")))
    rng = random.Random(preset)
    tokens = ",".join(str(rng.randrange(config["vocab_size"])) for _ in range(21))
    ours_logits = os.path.join(workdir, "ours.json")
    result = json.loads(run([hotpass, "generate", "--model", model_dir, "--forward", "reference", "--tokens", tokens, "-n", str(N_NEW),
                             "--ignore-eos", "--block-tokens", "8", "--logits", ours_logits, "--json"]))
    ref_path = os.path.join(workdir, "ref.json")
    run([sys.executable, os.path.join(HERE, "hf_forward.py"), model_dir, "--tokens", tokens,
         "--greedy", str(N_NEW), "--out", ref_path])
    ours_path = os.path.join(workdir, "ours_all.json")
    json.dump({"logits": json.load(open(ours_logits)), "greedy": result["generated"][0]}, open(ours_path, "w"))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "compare_logits.py"), ours_path, ref_path,
                           "--rel-tol", str(REL_TOL)], capture_output=True, text=True)
    label = preset + (" " + " ".join(extra_init) if extra_init else "")
    relative = next((line for line in proc.stdout.splitlines() if line.startswith("relative")), "")
    print(f"{label:48s} {'ok' if proc.returncode == 0 else 'MISMATCH'}  {relative}")
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
    return proc.returncode == 0


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed (apt-get install python3-torch): skipping")
        return 77
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    hotpass = sys.argv[1]
    presets = sys.argv[2:] or PRESETS
    ok = True
    with tempfile.TemporaryDirectory(prefix="hotpass-torch-") as workdir:
        for preset in presets:
            ok &= check(hotpass, preset, [], workdir)
        # Other weight dtypes and a sharded folder go through the same loader paths.
        ok &= check(hotpass, "tiny-qwen3", ["--dtype", "f16"], workdir)
        ok &= check(hotpass, "tiny-llama3", ["--dtype", "f32", "--max-shard-gb", "0.0005"], workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
