"""The steps of scripts/device/verify that drive gpupool on several GPUs (the jobs they start,
scripts/device/multigpu-jobs.py, use torch):

  fixture      `gpupool sim capture` of this machine; the fixture gives back `gpupool topo --json`
  placement    `gpupool run -g N` beside leases that make GPUs busy, judged by the independent
               scorer (topo_scorer.py) on the topology matrix, and compared with `gpupool sim place`
               on the captured fixture
  scorer       the scorer's self-test against `gpupool sim place` on every shipped fixture
  leases       concurrent `gpupool run -g 1|2` torch jobs: their GPUs, no overlap, no lease left
  allreduce    `gpupool launch` NCCL all-reduce on every GPU, then on a best and a worse set
  daemon-load  gpupoold on these GPUs: dispatch latency (bench/daemon_bench.py), /metrics under load
In a dry run (verify --sim) the jobs run without torch and /metrics readings are faked by an overlay.
"""
import argparse
import itertools
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

import daemon_bench
import harness
import topo_scorer
from verify_steps import DRY_RUN, HERE, JOB


def scores_of_matrix(s):
    """The scorer's view of the machine's topology matrix (OUT/topo-m.txt)."""
    with open(s.args.topo) as f:
        return topo_scorer.scores_of(topo_scorer.parse_matrix(f.read()))


def fmt_set(gpus):
    return "{" + ",".join(map(str, sorted(gpus))) + "}"


def stop(processes, timeout=15):
    """SIGTERM to the `gpupool run` processes this step started (they end their programs), then
    SIGKILL to their process groups (each started a session of its own) if they linger."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


# ---------------------------------------------------------------- 1b: the machine as a fixture

def differences(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path or '.'}: {a!r} (real) vs {b!r} (fixture)"]


def step_fixture(s):
    name = "1b fixture capture"
    fixture = os.path.join(s.args.out, "fixture.json")
    capture = s.cli("sim", "capture", "-o", fixture)
    if capture.returncode != 0:
        missing = "capture" not in s.cli("sim", "--help", quiet=True).stdout
        s.result("FAIL", name, ("`gpupool sim capture` is missing in this build (not in `gpupool sim --help`): "
                                if missing else
                                f"`gpupool sim capture -o fixture.json` exited {capture.returncode}: ")
                 + (capture.stderr.strip().splitlines() or ["no message"])[0])
        return
    real = s.cli("topo", "--json")
    replay = s.cli("topo", "--json", env=dict(os.environ, GPUPOOL_SIM=fixture))
    if real.returncode != 0 or replay.returncode != 0:
        s.result("FAIL", name, f"gpupool topo --json exited {real.returncode} (real), {replay.returncode} "
                 f"(GPUPOOL_SIM=fixture.json): {(replay.stderr or real.stderr).strip()[:200]}")
        return
    real, replay = json.loads(real.stdout), json.loads(replay.stdout)
    diff = differences(real, replay)
    same_matrix = real["matrix"] == replay["matrix"]
    figures = (f"fixture.json ({os.path.getsize(fixture)} bytes) reproduces the {len(real['gpus'])}-GPU matrix"
               if same_matrix else "matrix differs")
    s.result("PASS" if not diff else "FAIL", name,
             figures + ("; whole topo --json identical" if not diff else
                        f"; {len(diff)} differences, first: {'; '.join(diff[:3])}"))


# ---------------------------------------------------------------- 3: placement

def busy_sets(scores, n, count):
    """(label, busy GPUs) cases for a `count`-GPU job, and why the symmetry-breaking one is absent."""
    cases = [("none busy", [])]
    if n - 1 >= count:
        cases.append(("GPU 0 busy", [0]))
    half = list(range(0, n, 2))
    if n >= 2 and n - len(half) >= count and half not in [c[1] for c in cases]:
        cases.append(("half busy (even GPUs)", half))
    # The busy set under which the choice matters most: the most distinct set scores to choose from.
    best, chosen = 1, None
    for size in range(1, n - count + 1):
        for busy in itertools.combinations(range(n), size):
            if list(busy) in [c[1] for c in cases]:
                continue
            free = [i for i in range(n) if i not in busy]
            distinct = topo_scorer.distinct_scores(scores, free, count)
            if distinct > best:
                best, chosen = distinct, list(busy)
    if chosen:
        cases.append((f"asymmetric ({best} distinct set scores)", chosen))
        return cases, None
    labels = {topo_scorer.score_label(scores[i][j]) for i in range(n) for j in range(n) if i != j}
    why = ("no GPU can be busy" if n == count else
           f"no busy set makes the choice matter (every pair {'/'.join(sorted(labels))})")
    return cases, why


# The placement probe: its GPUs, after checking that the multicast switches reached it.
PROBE = ('[ "$NCCL_NVLS_ENABLE/$TORCH_SYMM_MEM_DISABLE_MULTICAST/$NVSHMEM_DISABLE_NVLS" = 0/1/1 ] || '
         '{ echo "multicast variables not passed through" >&2; exit 5; }; echo $GPUPOOL_GPUS')


def live_choice(s, busy, count):
    """Holds `busy` with `gpupool run --gpus I -- sleep`, then asks `gpupool run -g count`."""
    holders = []
    try:
        for i in busy:
            holders.append(subprocess.Popen(
                [s.gpupool, "run", "--gpus", str(i), "--wait", "0", "-q", "--name", f"busy-{i}", "--",
                 "sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        held = s.wait_for_leases(busy)
        if sorted(l["index"] for l in held) != sorted(busy):
            errors = [p.stderr.read().strip() for p in holders if p.poll() is not None]
            return None, f"could not hold {fmt_set(busy)}: leases {[l['index'] for l in held]} {errors}"
        probe = s.cli("run", "-g", count, "--wait", "0", "-q", "--name", "probe", "--", "sh", "-c", PROBE)
        if probe.returncode != 0:
            return None, f"gpupool run -g {count} exited {probe.returncode}: {probe.stderr.strip()}"
        return [int(i) for i in probe.stdout.strip().split(",")], None
    finally:
        stop(holders)
        left = s.wait_for_leases([], timeout=10)
        for lease in left:  # a sleep whose gpupool run is gone: ours, end it by its pid
            try:
                os.kill(lease["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
        if left:
            s.wait_for_leases([], timeout=10)


def step_placement(s):
    scores = scores_of_matrix(s)
    n = len(scores)
    if n != s.args.gpus:
        s.result("FAIL", "3 placement", f"the topology matrix has {n} GPUs, the machine {s.args.gpus}")
        return
    listed = s.cli("list", "--json", quiet=True)
    outside = {g["index"]: [p["pid"] for p in g["processes"]] for g in json.loads(listed.stdout or "[]")
               if g["processes"]} if listed.returncode == 0 else "gpupool list failed"
    if outside:
        s.result("FAIL", "3 placement", f"GPUs in use before the step began (GPU: pids): {outside}")
        return
    fixture = s.args.fixture if s.args.fixture and (os.path.exists(s.args.fixture) or "/" not in s.args.fixture) \
        else None
    for count in (2, 4, 8):
        name = f"3 placement -g {count}"
        if count > n:
            s.result("SKIP", name, f"needs {count} GPUs, this machine has {n}")
            continue
        cases, why_not = busy_sets(scores, n, count)
        notes, ok = [], True
        for label, busy in cases:
            free = [i for i in range(n) if i not in busy]
            chosen, error = live_choice(s, busy, count)
            if error:
                ok = False
                notes.append(f"{label} {fmt_set(busy)}: {error}")
                continue
            optimal, figures = topo_scorer.judge(scores, free, chosen)
            note = (f"{label}{' ' + fmt_set(busy) if busy else ''} -> {fmt_set(chosen)} "
                    f"{figures['chosen_score']['worst']}/{figures['chosen_score']['sum']}")
            if not optimal:
                note += (f" NOT OPTIMAL (best {figures['best']['worst']}/{figures['best']['sum']}, "
                         f"e.g. {fmt_set(figures['example_optimal'])})")
            else:
                note += f" optimal ({figures['optimal_sets']} optimal sets)"
            ok &= optimal
            if fixture:
                placed = s.cli("sim", "place", "--machine", fixture, "--free", ",".join(map(str, free)),
                               "-g", count, "--json", quiet=True)
                theirs = json.loads(placed.stdout)["chosen"]["gpus"] if placed.returncode == 0 else None
                agrees = theirs is not None and sorted(theirs) == sorted(chosen)
                ok &= agrees
                note += "; sim place agrees" if agrees else f"; sim place DIFFERS: {theirs}"
            print(note, flush=True)
            notes.append(note)
        if not fixture:
            notes.append("sim place not compared: no fixture (see 1b)")
        if why_not:
            notes.append(f"symmetry-breaking case skipped: {why_not}")
        s.result("PASS" if ok else "FAIL", name, "; ".join(notes))


# ---------------------------------------------------------------- 4: leases

def overlaps(records):
    """Pairs of jobs whose [start, end] overlap on one GPU."""
    by_gpu = {}
    for job, r in records.items():
        for gpu in r["gpus"]:
            by_gpu.setdefault(gpu, []).append((r["start"], r["end"], job))
    found = []
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, a_end, a), (b_start, _, b) in zip(spans, spans[1:]):
            if b_start < a_end:
                found.append(f"GPU {gpu}: {a} and {b} ({a_end - b_start:.3f} s)")
    return found, {gpu: len(spans) for gpu, spans in sorted(by_gpu.items())}


def most_at_once(records):
    events = sorted([(r["start"], len(r["gpus"])) for r in records.values()] +
                    [(r["end"], -len(r["gpus"])) for r in records.values()], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return peak


def step_leases(s):
    n, jobs = s.args.gpus, s.args.jobs
    name = "4 leases"
    sizes = [2 if n >= 2 and j % 3 == 1 else 1 for j in range(jobs)]
    directory = os.path.join(s.args.out, "leases")
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    processes = []
    for j, size in enumerate(sizes):
        with open(os.path.join(directory, f"job-{j}.log"), "w") as log:
            processes.append(subprocess.Popen(
                [s.gpupool, "run", "-g", str(size), "--name", f"lease-{j}", "--", *JOB, "lease",
                 os.path.join(directory, f"job-{j}.json"), "0.5"], stdout=log, stderr=log, start_new_session=True))
    deadline = started + s.args.limit
    for p in processes:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    unfinished = [j for j, p in enumerate(processes) if p.poll() is None]
    stop(processes)
    elapsed = time.monotonic() - started
    failed = [f"job {j} exit {p.returncode}" for j, p in enumerate(processes) if p.returncode != 0]
    records, problems = {}, []
    for j, size in enumerate(sizes):
        try:
            with open(os.path.join(directory, f"job-{j}.json")) as f:
                r = json.load(f)
        except OSError:
            problems.append(f"job {j}: no record")
            continue
        records[f"job {j}"] = r
        if len(r["gpus"]) != size or len(set(r["uuids"])) != size:
            problems.append(f"job {j}: asked -g {size}, got GPUs {r['gpus']}")
        if r["torch_uuids"] is not None and r["torch_uuids"] != r["uuids"]:
            problems.append(f"job {j}: torch sees {r['torch_uuids']}, leased {r['uuids']}")
        if r["cuda_visible_devices"] != ",".join(r["uuids"]):
            problems.append(f"job {j}: CUDA_VISIBLE_DEVICES={r['cuda_visible_devices']}")
    clashes, per_gpu = overlaps(records)
    left = s.leases()
    torch_checked = sum(1 for r in records.values() if r["torch_uuids"] is not None)
    figures = (f"{jobs} jobs ({sizes.count(1)} x -g 1, {sizes.count(2)} x -g 2) in {elapsed:.1f} s, "
               f"{len(records)} recorded, {len(failed)} failed, {len(unfinished)} unfinished; "
               f"torch saw exactly the leased UUIDs in {torch_checked - sum('torch sees' in p for p in problems)}"
               f"/{torch_checked}; jobs per GPU {per_gpu}; at most {most_at_once(records)} GPUs in use at once; "
               f"{len(clashes)} overlaps; leases afterwards {json.dumps(left)}")
    for line in failed + problems + clashes:
        print(line)
    ok = not failed and not unfinished and not problems and not clashes and left == [] and len(records) == jobs
    s.result("PASS" if ok else "FAIL", name,
             figures + ("" if ok else "; first problems: " + "; ".join((failed + problems + clashes)[:3])))


# ---------------------------------------------------------------- 5: all-reduce

def launch_allreduce(s, lease_args, tag):
    """Runs the all-reduce job under `gpupool launch`; returns (ok, RESULT dict, GPUs, transports, why)."""
    log = os.path.join(s.args.out, f"allreduce-{tag}.txt")
    args = [s.gpupool, "launch", *map(str, lease_args), "--wait", "120", "--name", f"allreduce-{tag}", "--",
            *JOB, "allreduce", str(s.args.mib), str(s.args.iters)]
    env = dict(os.environ, NCCL_DEBUG="INFO")
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=s.args.limit, env=env)
    except subprocess.TimeoutExpired as e:
        with open(log, "w") as f:  # what it printed before it was stopped tells where it hung
            f.write(f"$ {' '.join(args)}\ntimed out after {e.timeout} s\n")
            f.write(b"".join(part or b"" for part in (e.stdout, e.stderr)).decode(errors="replace"))
        return False, None, [], [], f"timed out after {e.timeout} s (see allreduce-{tag}.txt)"
    output = proc.stdout + proc.stderr
    with open(log, "w") as f:
        f.write(f"$ {' '.join(args)}\nexit {proc.returncode}\n{output}")
    result = next((json.loads(line.split("RESULT ", 1)[1]) for line in proc.stdout.splitlines()
                   if "RESULT " in line), None)
    gpus = sorted({int(m.group(1)) for m in re.finditer(r"rank \d+ of \d+ on GPU (\d+)", proc.stdout)})
    transports = sorted(set(re.findall(r" via (\S+)", output)))
    why = None
    if proc.returncode != 0:
        why = f"gpupool launch exited {proc.returncode}: " + "; ".join(
            [l for l in output.splitlines() if "gpupool:" in l or "Error" in l or "multicast" in l][:3])
    elif result is None:
        why = "no RESULT line from rank 0"
    elif not result.get("sum_ok") or result.get("sees_its_gpu") is False:
        why = f"sum ok {result.get('sum_ok')}, rank 0 sees its GPU only {result.get('sees_its_gpu')}"
    return why is None, result, gpus, transports, why


def bandwidth(result, gpus, transports):
    if result.get("dry_run"):
        return f"ranks on GPUs {fmt_set(gpus)} (dry run: no torch, no bandwidth)"
    busbw = f"busbw {result['busbw_gbs']} GB/s" if result["world"] > 1 else "busbw n/a (1 rank)"
    return (f"{result['world']} ranks on GPUs {fmt_set(gpus)}, {result['bytes'] // 2**20} MiB float32 x "
            f"{result['iterations']}: {result['time_s'] * 1000:.2f} ms each, algbw {result['algbw_gbs']} GB/s, "
            f"{busbw}; sum ok; NCCL {result['nccl']}, transports {'/'.join(transports) or 'none shown'}")


def worse_set(scores):
    """The largest size k < n with a set whose worst pair is below the best set's; (k, worst set)."""
    n = len(scores)
    for k in range(n - 1, 1, -1):
        best, _ = topo_scorer.best_sets(scores, list(range(n)), k)
        worst = min(itertools.combinations(range(n), k), key=lambda g: topo_scorer.set_score(scores, g))
        if topo_scorer.set_score(scores, worst)[0] < best[0]:
            return k, list(worst), best
    return None, None, None


def step_allreduce(s):
    n = s.args.gpus
    scores = scores_of_matrix(s)
    ok, result, gpus, transports, why = launch_allreduce(s, ["-g", n], "all")
    s.result("PASS" if ok else "FAIL", f"5a all-reduce on all {n} GPUs",
             bandwidth(result, gpus, transports) if ok else why)
    name = "5b all-reduce, best vs worse set"
    k, worst, best = worse_set(scores)
    if k is None:
        labels = {topo_scorer.score_label(scores[i][j]) for i in range(n) for j in range(n) if i != j}
        s.result("SKIP", name, "needs 3 or more GPUs" if n < 3 else
                 f"every set of 2 to {n - 1} GPUs has the same worst pair ({'/'.join(sorted(labels))})")
        return
    good = launch_allreduce(s, ["-g", k], f"best-{k}")
    bad = launch_allreduce(s, ["--gpus", ",".join(map(str, worst)), "-g", k], f"worse-{k}")
    if not good[0] or not bad[0]:
        s.result("FAIL", name, f"best set: {good[4] or 'ok'}; worse set {fmt_set(worst)}: {bad[4] or 'ok'}")
        return
    optimal = topo_scorer.set_score(scores, good[2]) == best
    worse_score = topo_scorer.set_score(scores, worst)
    figures = (f"-g {k}: gpupool chose {fmt_set(good[2])} ({'optimal' if optimal else 'NOT OPTIMAL'}, worst pair "
               f"{topo_scorer.score_label(best[0])}): {bandwidth(good[1], good[2], good[3])} | worse set "
               f"{fmt_set(worst)} (worst pair {topo_scorer.score_label(worse_score[0])}): "
               f"{bandwidth(bad[1], bad[2], bad[3])}")
    if not good[1].get("dry_run"):
        figures += f" | best/worse busbw ratio {good[1]['busbw_gbs'] / max(bad[1]['busbw_gbs'], 1e-9):.2f}"
    s.result("PASS" if optimal else "FAIL", name, figures)


# ---------------------------------------------------------------- 6: the daemon

METRIC = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def gpu_metrics(text):
    """{metric: {gpu index: (value, labels)}} of the DCGM_FI_DEV_* series."""
    found = {}
    for line in text.splitlines():
        m = METRIC.match(line)
        if m and m.group(1).startswith("DCGM_FI_DEV_"):
            labels = dict(LABEL.findall(m.group(2)))
            found.setdefault(m.group(1), {})[int(labels["gpu"])] = (float(m.group(3)), labels)
    return found


# The load job's matmul loop keeps its GPU busy; a reading below this is from before it got going
# (the first nonzero readings can be a few %), so /metrics is read again.
LOADED_UTILIZATION = 50


def metrics_problems(metrics, n, loaded):
    """What /metrics lacks: every GPU's utilisation and memory; on the loaded GPUs memory in use,
    utilisation at least LOADED_UTILIZATION and the job's label."""
    problems = []
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
        missing = [g for g in range(n) if g not in metrics.get(metric, {})]
        if missing:
            problems.append(f"{metric} missing for GPUs {missing}")
    for gpu, job in loaded.items():
        for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
            value, labels = metrics.get(metric, {}).get(gpu, (None, {}))
            least = LOADED_UTILIZATION if metric == "DCGM_FI_DEV_GPU_UTIL" else 1
            if value is None or value < least:
                problems.append(f"{metric} of loaded GPU {gpu} is {value}, below {least}")
            if value is not None and str(job) not in labels.get("job_id", "").split(","):
                problems.append(f"{metric} of GPU {gpu} has job_id {labels.get('job_id')!r}, not {job}")
    return problems


def dispatch_check(s, bench):
    rounds = math.ceil(s.args.jobs / bench.gpus)
    dispatch = daemon_bench.bench_dispatch(bench, rounds, s.args.job_ms, which=("busy",))
    with open(os.path.join(s.args.out, "daemon-dispatch.json"), "w") as f:
        json.dump(dispatch, f, indent=2)
    case = dispatch["busy"]["directory"]
    stamps = [line.split() for line in open(os.path.join(case, "stamps"))]
    records = {f"job {job}": {"gpus": [int(g) for g in gpus.split(",")], "start": float(a), "end": float(b)}
               for job, gpus, a, b in stamps}
    clashes, per_gpu = overlaps(records)
    db = sqlite3.connect(os.path.join(case, "state", "gpupool.db"))
    states = dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
    db.close()
    total = bench.gpus * rounds
    gap = dispatch["busy"]["gap"]
    daemon_part = dispatch["busy"]["daemon's view: B.start_time - A.end_time"]
    target = daemon_bench.TARGETS["dispatch_p50_ms"]
    # On the GPU machine the target is a check; a dry run's VM is several times slower.
    met = gap["p50_ms"] <= target
    ok = states == {"done": total} and len(stamps) == total and not clashes and (met or bool(DRY_RUN))
    s.result("PASS" if ok else "FAIL", "6a daemon dispatch",
             f"{total} jobs of {s.args.job_ms} ms on {bench.gpus} GPUs: states {states}, jobs per GPU {per_gpu}, "
             f"{len(clashes)} overlaps; job-to-job gap p50 {gap['p50_ms']} ms, p99 {gap['p99_ms']} ms, max "
             f"{gap['max_ms']} ms, of which the daemon's own part (B.start_time - A.end_time) p50 "
             f"{daemon_part['p50_ms']} ms ({dispatch['job']} stamp; target p50 <= {target} ms "
             f"{'met' if met else 'not judged in a dry run' if DRY_RUN else 'MISSED'})")


def metrics_check(s):
    n = s.args.gpus
    overlay = os.path.join(s.args.root, "sim-state.json")
    with s.daemon("", http="127.0.0.1:0",
                  env={"GPUPOOL_SIM_STATE": overlay} if DRY_RUN else None) as daemon:
        address = daemon.http_address()
        load = 1 if n == 1 else max(2, n // 2)
        ids = [daemon.enqueue([*JOB, "load", "60"]) for _ in range(load)]

        def settled():
            jobs = [daemon.show(i) for i in ids]
            return jobs if all(j["state"] != "queued" for j in jobs) else None
        jobs = harness.wait_until(settled, 60, interval=0.2, what="the load jobs starting")
        loaded = {j["gpus"][0]: j["id"] for j in jobs if j["state"] == "running"}
        if DRY_RUN:  # the simulated GPUs report what the overlay says
            with open(overlay + ".new", "w") as f:
                json.dump({"gpus": {str(g): {"utilization_gpu": 97, "utilization_memory": 30,
                                             "memory_used_mib": 500} for g in loaded}}, f)
            os.rename(overlay + ".new", overlay)
        problems, text = ["no load job running: " + str([(j["id"], j["state"]) for j in jobs])], ""
        deadline = time.monotonic() + 45
        while loaded and time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
            except OSError as e:
                text, problems = "", [f"GET /metrics: {e}"]
            else:
                problems = metrics_problems(gpu_metrics(text), n, loaded)
            if not problems:
                break
            time.sleep(1)
        with open(os.path.join(s.args.out, "metrics.txt"), "w") as f:
            f.write(text)
        metrics = gpu_metrics(text)
    util = {g: v for g, (v, _) in sorted(metrics.get("DCGM_FI_DEV_GPU_UTIL", {}).items())}
    used = {g: v for g, (v, _) in sorted(metrics.get("DCGM_FI_DEV_FB_USED", {}).items())}
    figures = (f"{load} torch load job(s) on GPUs {fmt_set(loaded)}; {len(metrics)} DCGM metrics for "
               f"{len(util)}/{n} GPUs; utilisation % {util}; FB used MiB {used}")
    s.result("PASS" if not problems else "FAIL", "6b daemon /metrics under load",
             figures + ("" if not problems else "; problems: " + "; ".join(problems[:4])))


def step_daemon_load(s):
    bench = daemon_bench.Bench(argparse.Namespace(bin_dir=s.args.bin, work_dir=s.args.root,
                                                  machine=DRY_RUN or "real", keep=True))
    if bench.gpus != s.args.gpus:
        s.result("FAIL", "6 daemon", f"gpupool topo shows {bench.gpus} GPUs, the machine has {s.args.gpus}")
        return
    try:
        dispatch_check(s, bench)
    except (RuntimeError, AssertionError, OSError, KeyError) as e:
        s.result("FAIL", "6a daemon dispatch", f"{type(e).__name__}: {e}")
    try:
        metrics_check(s)
    except (RuntimeError, AssertionError, OSError, KeyError) as e:
        s.result("FAIL", "6b daemon /metrics under load", f"{type(e).__name__}: {e}")


def step_scorer(s):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "topo_scorer.py"), "self-test", s.args.bin],
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr, flush=True)
    line = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    if proc.returncode == 0:
        s.result("PASS", "3 scorer self-test", f"{line.removeprefix('self-test: ')} against gpupool sim place "
                 "on every shipped fixture")
    else:
        s.result("FAIL", "3 scorer self-test", line)
