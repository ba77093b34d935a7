"""The `slurm` step of scripts/device/verify, on a GPU machine without Slurm: what of the Slurm
integration touches real GPUs. gres.conf and the node line from real NVML (device minor numbers,
CPU affinity, NVLinks) beside what nvidia-smi says; then a Slurm job's daemon on the real GPU,
with the variables slurmd would set (SLURM_JOB_ID, SLURM_JOB_GPUS = the device's minor number),
running PyTorch jobs, ending with the shell that started it and taking its job with it.
"""
import os
import random
import re
import shutil

from verify_steps.gpu import run

PROBE = ('import os, torch; x = torch.ones(1024, 1024, device="cuda"); print("cuda", torch.cuda.device_count(), '
         'torch.cuda.get_device_name(0), os.environ["CUDA_VISIBLE_DEVICES"], float(x.sum()))')
HOLD = 'import torch, time; x = torch.ones(1, device="cuda"); print("holding", flush=True); time.sleep(600)'
COMPUTE_APPS = "nvidia-smi --query-compute-apps=pid --format=csv,noheader"


def shell(script, env, timeout=300):
    """A bash script (what a user types in a Slurm job's shell); its output shown in the details."""
    return run(["bash", "-c", script], timeout, env=env)


def step_slurm(s):
    env = dict(os.environ, PATH=f"{s.args.bin}:{os.environ['PATH']}")
    for name in ("GPUPOOL_RUNTIME_DIR", "GPUPOOL_STATE_DIR"):
        env.pop(name, None)  # a Slurm job's daemon finds its own
    minor = re.search(r"Minor Number\s*:\s*(\d+)", run(["nvidia-smi", "-q"], 60).stdout).group(1)
    uuid = run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], 60).stdout.split()[0]

    gres = run([s.gpupool, "slurm", "gres-conf"], 60, env=env).stdout
    node = run([s.gpupool, "slurm", "node-conf"], 60, env=env).stdout
    s.check(f"gres.conf names /dev/nvidia{minor}", f"File=/dev/nvidia{minor} " in gres)
    s.check("gres.conf gives Cores= or says why not",
            re.search(r"^Name=gpu .* Cores=|Cores= is left out", gres, re.M) is not None)
    s.check("node line has Gres=gpu:", re.search(r"^NodeName=.* Gres=gpu:", node, re.M) is not None)

    job = 900000 + random.randrange(32768)
    env.update(SLURM_JOB_ID=str(job), SLURM_JOB_GPUS=minor)
    status = run([s.gpupool, "slurm", "status"], 60, env=env).stdout
    s.check(f"status maps /dev/nvidia{minor} to {uuid}", f"/dev/nvidia{minor}  {uuid}" in status)
    try:
        packed = shell(f"""set -e
gpupool slurm start
for i in 1 2 3; do gpupool submit -g 1 --name probe$i -- python3 -c '{PROBE}' > /dev/null; done
gpupool wait --all
for id in $(gpupool jobs --all --json | python3 -c 'import json, sys; print(*[j["id"] for j in json.load(sys.stdin)])')
do gpupool logs $id; done
gpupool slurm stop""", env)
        ran = len(re.findall(rf"^cuda 1 .* {uuid} 1048576.0$", packed.stdout, re.M))
        s.check("three packed jobs ran on the GPU by UUID", ran == 3, f"{ran} of 3")

        # The shell below ends at once; the daemon it started must notice and cancel its job.
        shell(f"""gpupool slurm start > /dev/null
gpupool submit -g 1 --name long -- python3 -c '{HOLD}'
for i in $(seq 1 100); do {COMPUTE_APPS} | grep -q . && break; sleep 0.2; done""", env)
        left = run(["bash", "-c", f"for i in $(seq 1 100); do [ -z \"$({COMPUTE_APPS})\" ] && exit 0; sleep 0.2; done; "
                    "exit 1"], 60)
        s.check("the job left the GPU once the shell had ended", left.returncode == 0)
        with open(f"/tmp/gpupool-{job}/gpupoold.log") as f:
            log = f.read()
        s.check("gpupoold said why it stopped", "has exited: cancelling every job and stopping" in log,
                (log.strip().splitlines() or [""])[-1])

        bad = run([s.gpupool, "slurm", "start"], 60, env=dict(env, SLURM_JOB_GPUS="99"))
        one_line = "gpupool: SLURM_JOB_GPUS=99: no GPU here is /dev/nvidia99"
        s.check("one line for a device number that is not here",
                bad.returncode != 0 and bad.stderr.strip() == one_line, bad.stderr.strip())
    finally:
        shutil.rmtree(f"/tmp/gpupool-{job}", ignore_errors=True)
