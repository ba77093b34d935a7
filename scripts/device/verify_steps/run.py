"""The `run` step of scripts/device/verify: gpupool run / launch on a real GPU, with torch.

  1. `gpupool run -g 1`: torch sees exactly the leased GPU (UUIDs compared);
  2. two exclusive runs on GPU 0: the second starts only after the first ended;
  3. two shared runs (--mem 20G) on GPU 0: they hold the GPU at the same time;
  4. `gpupool launch -g 1 --per-gpu 2`: a torch.distributed all-reduce over gloo, sum checked.
"""
import subprocess

from verify_steps import PLAIN

SEES = ("import os, torch; n = torch.cuda.device_count(); u = 'GPU-' + str(torch.cuda.get_device_properties(0).uuid); "
        "print('torch sees', n, 'GPU(s):', u); print('leased:', os.environ['GPUPOOL_GPU_UUIDS']); "
        "print('CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES']); "
        "raise SystemExit(0 if n == 1 and u == os.environ['GPUPOOL_GPU_UUIDS'] else 3)")
HOLD = ("import sys, time, torch; x = torch.ones(256, 1024, 1024, device='cuda'); "
        "print(sys.argv[1], 'start', time.time(), flush=True); time.sleep(float(sys.argv[2])); "
        "print(sys.argv[1], 'end', time.time(), flush=True)")
ALLREDUCE = ("import os, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
             "r = dist.get_rank(); t = torch.tensor([float(r + 1)]); dist.all_reduce(t); "
             "w = dist.get_world_size(); ok = t.item() == w * (w + 1) / 2; "
             "print('rank', r, 'of', w, 'sum', t.item(), 'ok' if ok else 'WRONG', 'cuda devices', "
             "torch.cuda.device_count()); dist.destroy_process_group(); raise SystemExit(0 if ok else 4)")


def times(output, name):
    """{'start': t, 'end': t} from HOLD's lines."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == name:
            found[parts[1]] = float(parts[2])
    return found


def holding(s, name, seconds, *options):
    """`gpupool run OPTIONS` of HOLD on GPU 0, in the background."""
    return subprocess.Popen([s.gpupool, "run", "--gpus", "0", *options, "--name", name, "--", *PLAIN, "python3",
                             "-c", HOLD, name, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def shown(name, process):
    out, err = process.communicate(timeout=300)
    print(f"$ gpupool run ... {name}  -> exit {process.returncode}\n{out}{err}", flush=True)
    return out, err


def step_run(s):
    proc = s.cli("run", "-g", "1", "--", *PLAIN, "python3", "-c", SEES, timeout=300)
    s.check("torch sees exactly the leased GPU", proc.returncode == 0, proc.stdout.strip().replace("\n", "; "))

    first = holding(s, "first", 4)
    s.wait_for_leases([0])  # the first holds GPU 0 before the second asks for it
    second = holding(s, "second", 0)
    (out1, _), (out2, err2) = shown("first", first), shown("second", second)
    t1, t2 = times(out1, "first"), times(out2, "second")
    s.check("second exclusive run waited for the first", "end" in t1 and "start" in t2 and t2["start"] >= t1["end"],
            f"first ended {t1.get('end')}, second started {t2.get('start')}; waiting line shown: "
            f"{'waiting for' in err2}")

    shared = [holding(s, f"shared{i}", 3, "--mem", "20G") for i in range(2)]
    spans = [times(shown(f"shared{i}", p)[0], f"shared{i}") for i, p in enumerate(shared)]
    together = all("start" in span and "end" in span for span in spans) and \
        max(span["start"] for span in spans) < min(span["end"] for span in spans)
    s.check("two shared runs held the GPU together", together, str(spans))

    proc = s.cli("launch", "-g", "1", "--per-gpu", "2", "--", *PLAIN, "python3", "-c", ALLREDUCE, timeout=300)
    s.check("launch -g 1 --per-gpu 2 all-reduce (gloo)", proc.returncode == 0 and proc.stdout.count(" ok ") == 2)
