#!/usr/bin/env python3
"""The jobs scripts/device/verify starts on the GPUs, with torch. Every job first checks
that NVLink multicast is still switched off in its environment (the three variables below reach
it only if gpupool passed them through) and exits 5 if not.

  multigpu-jobs.py hold GIB SECONDS        GIB GiB on every visible GPU; prints "ready"
  multigpu-jobs.py lease OUT.json SECONDS  torch sees exactly GPUPOOL_GPU_UUIDS, in order; allocates
                                           a little on each; writes start, end, GPUs to OUT.json
  multigpu-jobs.py allreduce MIB ITERS     torch.distributed NCCL all-reduce (the env:// variables of
                                           gpupool launch): sum checked, then bus bandwidth timed;
                                           rank 0 prints "RESULT {json}"
  multigpu-jobs.py load SECONDS            keeps its GPU busy with matrix products

With VERIFY_SIM set (a dry run on a simulated machine, which has no CUDA) torch is not
imported: the jobs check their environment and report what they can without it.
"""
import json
import os
import sys
import time

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DRY_RUN = bool(os.environ.get("VERIFY_SIM"))


def check_environment():
    wrong = {k: os.environ.get(k) for k, v in NO_MULTICAST.items() if os.environ.get(k) != v}
    if wrong:
        print(f"multicast variables missing or changed in the job's environment: {wrong}", flush=True)
        sys.exit(5)


def torch_uuids(torch):
    return ["GPU-" + str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]


def nccl_version(torch):
    version = torch.cuda.nccl.version()  # a tuple in recent torch, an integer (2xxyy) before
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def hold(gib, seconds):
    import torch
    held = [torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{i}")
            for i in range(torch.cuda.device_count())]
    torch.cuda.synchronize()
    print(f"ready: {gib} GiB on each of {len(held)} GPUs", flush=True)
    time.sleep(seconds)


def lease(out, seconds):
    start = time.time()
    leased = os.environ["GPUPOOL_GPU_UUIDS"].split(",")
    record = {"start": start, "gpus": [int(i) for i in os.environ["GPUPOOL_GPUS"].split(",")],
              "uuids": leased, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if DRY_RUN:
        record["torch_uuids"] = None
        time.sleep(seconds)
    else:
        import torch
        record["torch_uuids"] = torch_uuids(torch)
        blocks = [torch.ones(64, 2**20, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
        torch.cuda.synchronize()
        record["allocated_mib"] = sum(b.numel() * b.element_size() for b in blocks) // 2**20
        time.sleep(seconds)
        del blocks
    record["end"] = time.time()
    with open(out, "w") as f:
        json.dump(record, f)
    return 0 if record["torch_uuids"] in (None, leased) else 3


def allreduce(mib, iters):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    result = {"rank": rank, "world": world, "gpus": os.environ["GPUPOOL_GPUS"],
              "uuid": os.environ["GPUPOOL_GPU_UUIDS"]}
    if DRY_RUN:
        print(f"rank {rank} of {world} on GPU {result['gpus']}: no torch in a dry run", flush=True)
        if rank == 0:
            print("RESULT " + json.dumps(dict(result, dry_run=True, sum_ok=True)), flush=True)
        return 0
    import torch
    import torch.distributed as dist
    # gpupool launch shows each process its own GPU only, so LOCAL_RANK's device is cuda:0.
    visible = torch_uuids(torch)
    device = torch.device("cuda", local_rank % len(visible))
    torch.cuda.set_device(device)
    sees_its_gpu = visible == [result["uuid"]]
    dist.init_process_group("nccl")
    check = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(check)
    expected = world * (world + 1) / 2
    sum_ok = bool((check == expected).all().item())
    elements = mib * 2**20 // 4
    data = torch.zeros(elements, dtype=torch.float32, device=device)
    for _ in range(5):  # warm-up: NCCL's connections and buffers
        dist.all_reduce(data)
    torch.cuda.synchronize()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(data)
    torch.cuda.synchronize()
    elapsed = torch.tensor([time.perf_counter() - started], device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time, as a collective ends
    seconds = elapsed.item() / iters
    size = elements * 4
    algbw = size / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    ok = sum_ok and sees_its_gpu
    print(f"rank {rank} of {world} on GPU {result['gpus']}: sum {check[0].item()} (expected {expected}) "
          f"{'ok' if sum_ok else 'WRONG'}; torch sees {visible}", flush=True)
    if rank == 0:
        result.update(sum_ok=sum_ok, sees_its_gpu=sees_its_gpu, bytes=size, iterations=iters,
                      time_s=seconds, algbw_gbs=round(algbw, 2), busbw_gbs=round(busbw, 2),
                      nccl=nccl_version(torch), torch=torch.__version__)
        print("RESULT " + json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 4


def load(seconds):
    end = time.time() + seconds
    if DRY_RUN:
        print("loading (dry run: sleeping)", flush=True)
        time.sleep(seconds)
        return 0
    import torch
    a = torch.randn(8192, 8192, device="cuda")
    print(f"loading GPU {os.environ.get('GPUPOOL_GPUS')}", flush=True)
    while time.time() < end:
        for _ in range(10):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    return 0


def main():
    check_environment()
    command, args = sys.argv[1], sys.argv[2:]
    if command == "hold":
        return hold(float(args[0]), float(args[1]))
    if command == "lease":
        return lease(args[0], float(args[1]))
    if command == "allreduce":
        return allreduce(int(args[0]), int(args[1]))
    if command == "load":
        return load(float(args[0]))
    sys.exit(f"unknown job {command}")


if __name__ == "__main__":
    sys.exit(main())
