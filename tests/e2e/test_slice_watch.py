#!/usr/bin/env python3
"""Slices that hold: the slice watchdog (NVML's per-process memory against each slice, docs/leases.md)
warns of or stops a job past its slice, and slice jobs get the frameworks' own memory limits."""
import json
import os
import shutil
import tempfile
import unittest

import subprocess

from harness import GPUPOOL, Daemon, clean_env, main, until_exists, wait_until
from test_monitoring import get, get_json, parse_metrics, series, write_overlay

SLICE_MIB = 20480
OVER_MIB = 31949  # 31.2 GiB
REASON = "used 31.2 GiB of its 20 GiB slice"
LIMITS = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH",
          "CUPY_GPU_MEMORY_LIMIT")


class SliceWatchTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-slices-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        write_overlay(self.overlay, {})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def daemon(self, policy):
        return Daemon(http="127.0.0.1:0", config=f'slice_overrun = "{policy}"\n',
                      env={"GPUPOOL_SIM_STATE": self.overlay})

    def two_slices_on_one_gpu(self, d):
        """Two 20 GiB slice jobs that write their PIDs and run until told; returns (ids, pids, gpu)."""
        jobs = [d.enqueue(["sh", "-c", f"echo $$ > {d.path(name)}.pid; {until_exists(d.path('go'))}"],
                          mem_mib=SLICE_MIB, name=name) for name in ("hungry", "neighbour")]
        shown = [d.wait_state(job, "running") for job in jobs]
        self.assertEqual(shown[0]["gpus"], shown[1]["gpus"], "slices pack onto one GPU")
        pids = [int(wait_until(lambda n=name: _read(d.path(f"{n}.pid")), what=f"{name}'s pid"))
                for name in ("hungry", "neighbour")]
        return jobs, pids, shown[0]["gpus"][0]

    def use_memory(self, gpu, pids_mib):
        """The simulated GPU lists these processes with this much memory each."""
        processes = [{"pid": pid, "used_memory_mib": mib, "kind": "compute"} for pid, mib in pids_mib]
        write_overlay(self.overlay, {gpu: {"processes": processes,
                                           "memory_used_mib": sum(mib for _, mib in pids_mib)}})

    def test_warn_shows_the_overrun_and_the_job_runs_on(self):
        with self.daemon("warn") as d:
            address = d.http_address()
            (hungry, neighbour), pids, gpu = self.two_slices_on_one_gpu(d)
            self.use_memory(gpu, [(pids[0], OVER_MIB), (pids[1], 1000)])

            def warned():
                entries = {job["id"]: job for job in get_json(address, "/api/jobs")["jobs"]}
                # The API lists a job from the daemon's next publish after it starts.
                return entries.get(hungry, {}).get("slice_overrun") == REASON and entries
            entries = wait_until(warned, what="the API's warning")
            self.assertEqual((entries[hungry]["slice_used_mib"], entries[neighbour]["slice_used_mib"]), (OVER_MIB, 1000))
            self.assertIsNone(entries[neighbour]["slice_overrun"])
            samples = parse_metrics(get(address, "/metrics")[2])
            self.assertEqual(series(samples, "gpupool_job_slice_overrun", job_id=hungry)[0][1], 1)
            self.assertEqual(series(samples, "gpupool_job_slice_overrun", job_id=neighbour)[0][1], 0)
            self.assertEqual(series(samples, "gpupool_job_slice_used_bytes", job_id=hungry)[0][1], OVER_MIB << 20)
            self.assertEqual(d.show(hungry)["usage"]["slice_used_mib"], OVER_MIB)
            listing = d.gp("jobs", check=True).stdout
            self.assertIn(f"Over {OVER_MIB * 100 // SLICE_MIB}%", listing)
            self.assertEqual(listing.count("Over "), 1, listing)
            top = d.gp("top", "--once", env={"COLUMNS": "200"}, check=True).stdout
            self.assertIn(f"over its slice: {REASON}", top)

            # Warned at every sample since, never stopped; told as an event once.
            d.wait_for_samples(3)
            self.assertEqual([d.job_state(job) for job in (hungry, neighbour)], ["running", "running"])
            told = [json.loads(line) for line in
                    d.gp("events", "--kind", "slice_overrun", "--json", check=True).stdout.splitlines()]
            self.assertEqual([(e["job"], e["gpus"], e["detail"]) for e in told], [(hungry, [gpu], f"{REASON} on GPU {gpu}")])
            d.touch("go")
            self.assertEqual([job["state"] for job in d.finish(hungry, neighbour)], ["done", "done"])

    def test_slices_sharing_a_gpu_each_get_their_own_utilisation_and_idle_flag(self):
        # 2 s: the sample where a slice's processes first appear reads them before the watchdog
        # has found them (0 for both slices), which a slow run may take a second over.
        with Daemon(http="127.0.0.1:0", config='[monitor]\nidle_flag_after = "2s"\n',
                    env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            address = d.http_address()
            # Every card busy from the start: before NVML lists their processes, the slices read
            # the card's figure, and neither may be flagged idle then (however slow the start).
            busy_cards = {index: {"utilization_gpu": 90} for index in range(8)}
            write_overlay(self.overlay, busy_cards)
            (busy, idle), pids, gpu = self.two_slices_on_one_gpu(d)
            # Then all of the card's work is the first slice's (NVML's per-process SM utilisation).
            write_overlay(self.overlay, {**busy_cards, gpu: {"utilization_gpu": 90, "memory_used_mib": 2000, "processes": [
                {"pid": pids[0], "used_memory_mib": 1000, "kind": "compute", "sm_utilization": 90},
                {"pid": pids[1], "used_memory_mib": 1000, "kind": "compute"}]}})

            def flags():
                jobs = {job["id"]: job for job in get_json(address, "/api/jobs")["jobs"]}
                return jobs.get(busy, {}).get("idle"), jobs.get(idle, {}).get("idle")
            wait_until(lambda: flags() == (False, True), what="the idle slice flagged, its busy neighbour not")
            self.assertGreater(d.show(busy)["usage"]["mean_utilization"], 0)
            # Told by the daemon's loop after the sample that flagged it.
            told = wait_until(lambda: [json.loads(line)["job"] for line in
                                       d.gp("events", "--kind", "job_idle", "--json", check=True).stdout.splitlines()],
                              what="the job_idle event")
            self.assertEqual(told, [idle])
            d.touch("go")
            self.assertEqual([job["state"] for job in d.finish(busy, idle)], ["done", "done"])

    def test_stop_ends_the_job_with_its_figures_and_spares_its_neighbour(self):
        with self.daemon("stop") as d:
            (hungry, neighbour), pids, gpu = self.two_slices_on_one_gpu(d)
            self.use_memory(gpu, [(pids[0], SLICE_MIB), (pids[1], 1000)])  # all of it is not past it
            d.wait_for_samples(3)
            self.assertEqual(d.job_state(hungry), "running")

            self.use_memory(gpu, [(pids[0], OVER_MIB), (pids[1], 1000)])
            [ended] = d.finish(hungry, timeout=30)
            self.assertEqual((ended["state"], ended["reason"]), ("failed", REASON))
            self.assertIn(f"job {hungry} {REASON} on GPU {gpu}", d.log_text())
            d.wait_for_samples(3)
            self.assertEqual(d.job_state(neighbour), "running")
            d.touch("go")
            self.assertEqual(d.finish(neighbour)[0]["state"], "done")

    def test_off_watches_nothing(self):
        with Daemon(http="127.0.0.1:0", config='slice_enforcement = "off"\nslice_overrun = "stop"\n',
                    env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            address = d.http_address()
            (hungry, _), pids, gpu = self.two_slices_on_one_gpu(d)
            self.use_memory(gpu, [(pids[0], OVER_MIB)])
            d.wait_for_samples(3)
            entry = next(job for job in get_json(address, "/api/jobs")["jobs"] if job["id"] == hungry)
            self.assertEqual((entry["state"], entry["slice_used_mib"]), ("running", None))
            d.touch("go")
            d.finish(hungry)

    def test_slice_jobs_get_the_frameworks_limits_and_their_own_settings_win(self):
        with Daemon() as d:
            def run_env(*args, env=None):
                out = d.gp("run", "-q", *args, "--", "env", env=env, check=True).stdout
                return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            sliced = run_env("--mem", "20G")
            # 20 GiB of an H200's 143771 MiB.
            self.assertEqual({k: sliced.get(k) for k in LIMITS},
                             {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.1424", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                              "TF_FORCE_GPU_ALLOW_GROWTH": "true", "CUPY_GPU_MEMORY_LIMIT": str(20 << 30)})
            whole = run_env()
            self.assertEqual([k for k in LIMITS if k in whole], [])
            own = run_env("--mem", "20G", env={"TF_FORCE_GPU_ALLOW_GROWTH": "false"})
            self.assertEqual((own["TF_FORCE_GPU_ALLOW_GROWTH"], own["CUPY_GPU_MEMORY_LIMIT"]), ("false", str(20 << 30)))

            # A batch job, through the daemon's supervisor: the same.
            batch = d.submit("--mem", "20G", "--", "sh", "-c", f"env > {d.path('batch.env')}",
                             env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"})
            whole_batch = d.submit("--", "sh", "-c", f"env > {d.path('whole.env')}")
            self.assertEqual([job["state"] for job in d.finish(batch, whole_batch)], ["done", "done"])
            batch_env = _env_file(d.path("batch.env"))
            self.assertEqual((batch_env["XLA_PYTHON_CLIENT_MEM_FRACTION"], batch_env["TF_FORCE_GPU_ALLOW_GROWTH"]),
                             ("0.5", "true"))
            self.assertEqual([k for k in LIMITS if k in _env_file(d.path("whole.env"))], [])


class StandaloneRunWatchTest(unittest.TestCase):
    """`gpupool run --mem` without gpupoold watches its own slice."""

    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-run-watch-")
        self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)
        self.overlay = os.path.join(self.scratch, "overlay.json")
        write_overlay(self.overlay, {})

    def path(self, name):
        return os.path.join(self.scratch, name)

    def start(self, *options):
        """gpupool run --mem 20G OPTIONS, its program writing its pid and GPU and waiting for "go";
        returns (the process, its stderr file's path, the program's pid, its GPU)."""
        env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_SIM_STATE=self.overlay,
                        GPUPOOL_RUNTIME_DIR=self.path("run"))
        stderr_path = self.path("stderr")
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen([GPUPOOL, "run", "--mem", "20G", *options, "--", "sh", "-c",
                                     f"echo $$ $GPUPOOL_GPUS > {self.path('program')}; {until_exists(self.path('go'))}"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        pid, gpu = wait_until(lambda: _read(self.path("program")), what="the program's pid").split()
        return proc, stderr_path, int(pid), int(gpu)

    def use_memory(self, gpu, pid, mib):
        write_overlay(self.overlay, {gpu: {"processes": [{"pid": pid, "used_memory_mib": mib, "kind": "compute"}],
                                           "memory_used_mib": mib}})

    def test_warns_once_and_the_program_runs_on(self):
        proc, stderr, pid, gpu = self.start()
        self.use_memory(gpu, pid, OVER_MIB)
        warning = f"is over its slice of GPU {gpu}: {REASON}"
        wait_until(lambda: warning in _read(stderr), what="the warning")
        self.assertIsNone(proc.poll())
        open(self.path("go"), "w").close()
        self.assertEqual(proc.wait(timeout=30), 0)
        text = _read(stderr)
        self.assertEqual(text.count(warning), 1, text)
        self.assertIn(f"was over its slice at its peak: {REASON}", text)

    def test_stop_ends_the_program_past_its_slice(self):
        proc, stderr, pid, gpu = self.start("--slice-overrun", "stop")
        self.use_memory(gpu, pid, OVER_MIB)
        self.assertEqual(proc.wait(timeout=30), 143)  # SIGTERM: sh ends at once
        self.assertIn(f"was stopped: {REASON}", _read(stderr))

    def test_a_bad_policy_is_one_line(self):
        proc = subprocess.run([GPUPOOL, "run", "--mem", "20G", "--slice-overrun", "kill", "--", "true"],
                              env=clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_RUNTIME_DIR=self.path("run")),
                              capture_output=True, text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("--slice-overrun", proc.stderr)


def _read(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return text or None


def _env_file(path):
    with open(path) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


if __name__ == "__main__":
    main()
