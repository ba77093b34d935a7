#!/usr/bin/env python3
"""An independent placement scorer: reads the link matrix that `nvidia-smi topo -m` prints and
finds, by brute force, the N-GPU sets that docs/placement.md calls best (the worst pair's score
first, then the sum of the pair scores). It shares no code with gpupool, so it can check
gpupool's placement on a real machine. Python 3 standard library only.

  topo_scorer.py best TOPO.txt -g N [--free 0,1,4-7] [--set 0,1]
      prints {"best": {"worst", "sum"}, "optimal_sets": [...], "set": {...}} as JSON
  topo_scorer.py self-test BIN_DIR
      for every fixture of `gpupool sim list`: parses `gpupool topo` (the same matrix format),
      checks it against `gpupool topo --json`, and checks `gpupool sim place` for every N and
      several free sets against the brute force; exits 1 on any difference
"""
import argparse
import itertools
import json
import os
import random
import re
import subprocess
import sys

# docs/placement.md, "Pair score". nvidia-smi has no label for "on one board" (6).
PCIE_SCORES = {"PIX": 5, "PXB": 4, "PHB": 3, "NODE": 2, "SYS": 1, "SOC": 1, "N/A": 0}
NO_PAIRS = 1 << 30  # the worst pair of a set with fewer than two GPUs


def pair_score(label):
    match = re.fullmatch(r"NV(\d+)", label)
    if match:
        return 6 + int(match.group(1))
    if label.upper() in PCIE_SCORES:
        return PCIE_SCORES[label.upper()]
    raise ValueError(f"unknown link label {label!r}")


def score_label(score):
    if score == NO_PAIRS:
        return "none"
    if score > 6:
        return f"NV{score - 6}"
    return {6: "board", 5: "PIX", 4: "PXB", 3: "PHB", 2: "NODE", 1: "SYS", 0: "unknown"}[score]


def parse_matrix(text):
    """The GPU-to-GPU labels of `nvidia-smi topo -m` (tab-separated, maybe coloured, with NIC
    columns and rows after the GPUs) or of `gpupool topo` (space-padded): rows[i][j], "X" on the
    diagonal."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    # The matrix ends at the first blank line after its header: notes below it may start with a
    # GPU's name too ("GPU0 is in MIG mode ...").
    if start is not None:
        end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
        lines = lines[start:end]
    header = next((line.split() for line in lines if re.match(r"^\s+GPU0\b", line)), None)
    if header is None:
        raise ValueError("no header line starting with GPU0")
    columns = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    if columns != [f"GPU{i}" for i in range(len(columns))] or header[:len(columns)] != columns:
        raise ValueError(f"GPU columns not first and in order: {header}")
    rows = {}
    for line in lines:
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and not re.match(r"^\s", line):
            rows[int(cells[0][3:])] = cells[1:1 + len(columns)]
    n = len(columns)
    if sorted(rows) != list(range(n)):
        raise ValueError(f"GPU rows {sorted(rows)} do not match the {n} GPU columns")
    matrix = [rows[i] for i in range(n)]
    for i in range(n):
        if len(matrix[i]) != n or matrix[i][i] != "X":
            raise ValueError(f"GPU{i}: row {matrix[i]} has not {n} cells with X on the diagonal")
        for j in range(n):
            if i != j and matrix[i][j] != matrix[j][i]:
                raise ValueError(f"GPU{i}-GPU{j}: {matrix[i][j]} one way, {matrix[j][i]} the other")
    return matrix


def scores_of(matrix):
    n = len(matrix)
    return [[0 if i == j else pair_score(matrix[i][j]) for j in range(n)] for i in range(n)]


def set_score(scores, gpus):
    """(worst pair, pair-score sum): compared as a tuple, higher is better."""
    pairs = [scores[a][b] for a, b in itertools.combinations(sorted(gpus), 2)]
    return (min(pairs) if pairs else NO_PAIRS, sum(pairs))


def best_sets(scores, free, count):
    """The best score over all `count`-subsets of `free`, and every subset that has it."""
    if count > len(free):
        raise ValueError(f"need {count} GPUs but only {len(free)} are free")
    best, optimal = None, []
    for gpus in itertools.combinations(sorted(free), count):
        score = set_score(scores, gpus)
        if best is None or score > best:
            best, optimal = score, [list(gpus)]
        elif score == best:
            optimal.append(list(gpus))
    return best, optimal


def distinct_scores(scores, free, count):
    return len({set_score(scores, gpus) for gpus in itertools.combinations(sorted(free), count)})


def score_json(score):
    return {"worst": score_label(score[0]), "worst_score": score[0], "sum": score[1]}


def parse_list(text):
    """0,1,4-7 -> [0, 1, 4, 5, 6, 7]"""
    found = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        found += range(int(low), int(high or low) + 1)
    return found


def judge(scores, free, chosen):
    """Is `chosen` (from the free GPUs) one of the best sets? Returns (ok, figures)."""
    best, optimal = best_sets(scores, free, len(chosen))
    mine = set_score(scores, chosen)
    return (set(chosen) <= set(free) and mine == best,
            {"chosen": sorted(chosen), "chosen_score": score_json(mine), "best": score_json(best),
             "optimal_sets": len(optimal), "example_optimal": optimal[0]})


def self_test(bin_dir):
    gpupool = os.path.join(bin_dir, "gpupool")

    def run(*args, sim=None):
        env = {k: v for k, v in os.environ.items() if k not in ("GPUPOOL_SIM", "CUDA_VISIBLE_DEVICES")}
        if sim:
            env["GPUPOOL_SIM"] = sim
        proc = subprocess.run([gpupool, *args], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"gpupool {' '.join(args)} (GPUPOOL_SIM={sim}) exited {proc.returncode}: "
                             f"{proc.stderr.strip()}")
        return proc.stdout

    failures = checked = 0
    for fixture in run("sim", "list").split():
        matrix = parse_matrix(run("topo", sim=fixture))
        expected = json.loads(run("topo", "--json", sim=fixture))["matrix"]
        checked += 1
        if matrix != expected:
            failures += 1
            print(f"FAIL {fixture}: parsed matrix {matrix} != gpupool topo --json {expected}")
        scores = scores_of(matrix)
        n = len(matrix)
        rng = random.Random(n)
        free_sets = [list(range(n))] + [sorted(rng.sample(range(n), rng.randint(1, n))) for _ in range(6)]
        for free in free_sets:
            for count in range(1, len(free) + 1):
                placed = json.loads(run("sim", "place", "--machine", fixture, "--free",
                                        ",".join(map(str, free)), "-g", str(count), "--json"))
                chosen = placed["chosen"]["gpus"]
                ok, figures = judge(scores, free, chosen)
                theirs = (placed["chosen"]["score"]["worst_link"], placed["chosen"]["score"]["pair_score_sum"])
                ours = (figures["chosen_score"]["worst"], figures["chosen_score"]["sum"])
                ok = ok and theirs == ours
                checked += 1
                if not ok:
                    failures += 1
                print(f"{'ok  ' if ok else 'FAIL'} {fixture} free {free} -g {count}: gpupool {chosen} "
                      f"{theirs}, scorer {ours}, best {figures['best']['worst']}/{figures['best']['sum']} "
                      f"({figures['optimal_sets']} optimal sets)")
    print(f"self-test: {checked} checks, {failures} failures")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    best = sub.add_parser("best", help="the best N-GPU sets of a matrix")
    best.add_argument("topo", help="a file holding `nvidia-smi topo -m` output")
    best.add_argument("-g", "--gpus", type=int, required=True)
    best.add_argument("--free", help="free GPUs, e.g. 0,1,4-7 (default: all)")
    best.add_argument("--set", help="also judge this set, e.g. 0,1")
    test = sub.add_parser("self-test", help="check against gpupool sim place on every fixture")
    test.add_argument("bin_dir")
    args = parser.parse_args()
    if args.command == "self-test":
        return self_test(args.bin_dir)
    with open(args.topo) as f:
        scores = scores_of(parse_matrix(f.read()))
    free = parse_list(args.free) if args.free else list(range(len(scores)))
    score, optimal = best_sets(scores, free, args.gpus)
    out = {"best": score_json(score), "optimal_sets": optimal}
    if args.set:
        ok, out["set"] = judge(scores, free, parse_list(args.set))
        out["set"]["optimal"] = ok
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
