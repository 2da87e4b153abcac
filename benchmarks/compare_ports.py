"""Run the three ports (examples/ppo_continuous.py, sac.py, nanogpt_char.py) and their PyTorch originals
(benchmarks/torch_ref/*_torch.py) at the same seeds and step counts, one run at a time, and print the tables of
benchmarks/RESULTS.md ("PyTorch programs ported by renaming").

python benchmarks/compare_ports.py [--programs ppo sac gpt] [--frameworks torch tlgpu] [--seeds 1 2 3]
       [--out runs.jsonl] [--torch-threads 2] [--table-only]
Each run appends one JSON line to --out (program, framework, seed, the summary's numbers, the device); with
--table-only the file is only read and the tables printed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAMS = {
    # name: (tlgpu script, torch script, common args)
    "ppo": ("examples/ppo_continuous.py", "benchmarks/torch_ref/ppo_continuous_torch.py", ["--total-timesteps", "163840"]),
    "sac": ("examples/sac.py", "benchmarks/torch_ref/sac_torch.py", ["--total-timesteps", "8000", "--learning-starts", "1000"]),
    "gpt": ("examples/nanogpt_char.py", "benchmarks/torch_ref/nanogpt_char_torch.py", ["--max-iters", "300"]),
}

PATTERNS = {
    "ppo": {"return": r"mean return of the last 20 episodes (-?[0-9.]+)", "ms_per_step": r"update phase ([0-9.]+) ms per gradient step",
            "s_per_iter": r"([0-9.]+) s per iteration", "wall_s": r"gradient steps in ([0-9.]+) s"},
    "sac": {"return": r"mean return of the last 5 episodes (-?[0-9.]+)", "first_return": r"first 5 episodes (-?[0-9.]+)",
            "ms_per_step": r"([0-9.]+) ms per training step", "qf_loss": r"final qf_loss (-?[0-9.eE+-]+|nan)",
            "wall_s": r"training steps in ([0-9.]+) s"},
    "gpt": {"train_loss": r"final train loss ([0-9.]+)", "val_loss": r"val loss ([0-9.]+)$", "first_loss": r"first loss ([0-9.]+)",
            "ms_per_step": r"([0-9.]+) ms per iteration", "wall_s": r"iterations in ([0-9.]+) s"},
}


def run_one(program, framework, seed, torch_threads, extra):
    tl_script, th_script, common = PROGRAMS[program]
    script = tl_script if framework == "tlgpu" else th_script
    cmd = [sys.executable, os.path.join(ROOT, script), "--seed", str(seed)] + common + extra
    if framework == "torch":
        cmd += ["--threads", str(torch_threads)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=7200)    # a hang guard only
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    summary = [ln for ln in r.stdout.splitlines() if ln.startswith("summary:")][-1]
    rec = {"program": program, "framework": framework, "seed": seed, "cmd": " ".join(cmd[1:]),
           "elapsed_s": round(time.time() - t0, 1), "summary": summary,
           "device": r.stdout.splitlines()[0 if program != "gpt" else
                                           next(i for i, ln in enumerate(r.stdout.splitlines()) if ln.startswith("device:"))]}
    for key, pat in PATTERNS[program].items():
        m = re.search(pat, summary, re.M)
        rec[key] = float(m.group(1)) if m else None
    if program == "gpt":
        rec["sample"] = r.stdout.split("sample:\n", 1)[1].rsplit("\nsummary:", 1)[0][:120]
    return rec


def tables(records):
    out = []
    for program, cols in (("ppo", ["return", "ms_per_step", "s_per_iter", "wall_s"]),
                          ("sac", ["first_return", "return", "qf_loss", "ms_per_step", "wall_s"]),
                          ("gpt", ["first_loss", "train_loss", "val_loss", "ms_per_step", "wall_s"])):
        rows = [r for r in records if r["program"] == program]
        if not rows:
            continue
        out.append(f"\n{program}: " + PROGRAMS[program][0] + " " + " ".join(PROGRAMS[program][2]))
        out.append("| framework | seed | " + " | ".join(cols) + " |")
        out.append("|---|---|" + "---|" * len(cols))
        for r in sorted(rows, key=lambda r: (r["framework"], r["seed"])):
            out.append(f"| {r['framework']} | {r['seed']} | " + " | ".join(
                "-" if r.get(c) is None else f"{r[c]:.4g}" if abs(r[c]) < 10 else f"{r[c]:.1f}" for c in cols) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    ap.add_argument("--frameworks", nargs="+", default=["torch", "tlgpu"], choices=["torch", "tlgpu"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--out", default="compare_ports.jsonl")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("extra", nargs="*", help="after --: arguments passed to every script")
    args = ap.parse_args(argv)
    if not args.table_only:
        for program in args.programs:
            for framework in args.frameworks:
                for seed in args.seeds:
                    rec = run_one(program, framework, seed, args.torch_threads, args.extra)
                    print(json.dumps(rec), flush=True)
                    with open(args.out, "a") as f:
                        f.write(json.dumps(rec) + "\n")
    with open(args.out) as f:
        print(tables([json.loads(ln) for ln in f if ln.strip()]))


if __name__ == "__main__":
    main()
