#!/usr/bin/env bash
# What another user can tell an MPS control daemon set up as gpupoold sets one up (started by
# root under umask 022, pipe and log directories 0755), on a real GPU, no gpupool:
#
#     scripts/device/probe-mps-users.sh OUT
#
# As `nobody` it sends the control daemon the commands a hostile local user would (reading the
# server list, lowering or raising the default memory limit and thread share, quit), starts a
# CUDA context of its own, and records what was refused, what took effect (read back as root),
# and the pipe directory's modes: the facts behind docs/leases.md's "Who can tell the control
# daemon what".
set -u
out=${1:?usage: probe-mps-users.sh OUT}
mkdir -p "$out"
root=$(mktemp -d /tmp/mps-users.XXXXXX)
chmod 0755 "$root"
mkdir -m 0755 "$root/pipe" "$root/log"
export CUDA_MPS_PIPE_DIRECTORY=$root/pipe CUDA_MPS_LOG_DIRECTORY=$root/log CUDA_VISIBLE_DEVICES=0
(umask 022 && nvidia-cuda-mps-control -d)
for _ in $(seq 50); do [ -S "$root/pipe/control" ] && break; sleep 0.1; done

as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env "CUDA_MPS_PIPE_DIRECTORY=$root/pipe" "$@"; }
tell() {  # WHO COMMAND: what the control daemon answered, and the exit code
  local who=$1 command=$2 answer rc
  if [ "$who" = nobody ]; then
    answer=$(echo "$command" | as_nobody timeout 10 nvidia-cuda-mps-control 2>&1); rc=$?
  else
    answer=$(echo "$command" | timeout 10 nvidia-cuda-mps-control 2>&1); rc=$?
  fi
  echo "$who: $command -> rc $rc: $(echo "$answer" | tr '\n' ' ')"
}

{
  echo "== the pipe directory"
  ls -la "$root/pipe"
  echo "== commands"
  tell root "set_default_device_pinned_mem_limit 0 4G"
  tell root "set_default_active_thread_percentage 50"
  tell nobody get_server_list
  tell nobody "get_default_device_pinned_mem_limit 0"
  tell nobody "set_default_device_pinned_mem_limit 0 64G"
  tell nobody "set_default_active_thread_percentage 100"
  tell root "get_default_device_pinned_mem_limit 0"
  tell root "get_default_active_thread_percentage"
  echo "== a CUDA context of nobody's"
  as_nobody timeout 60 python3 -c '
import ctypes, time
cuda = ctypes.CDLL("libcuda.so.1")
device, context = ctypes.c_int(), ctypes.c_void_p()
print("cuInit", cuda.cuInit(0), "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0),
      "cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), flush=True)
free, total = ctypes.c_size_t(), ctypes.c_size_t()
print("cuMemGetInfo", cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
      "total MiB", total.value >> 20, flush=True)
time.sleep(4)' &
  client=$!
  sleep 2.5
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
  tell root get_server_list
  wait "$client"
  echo "== quit"
  tell nobody quit
  sleep 1
  tell root get_server_list
  tell root quit
} > "$out/mps-users.txt" 2>&1
cp -r "$root/log" "$out/mps-users-log"
cat "$out/mps-users.txt"
