#!/usr/bin/env python3
"""MIG devices leased and scheduled as hard-isolated units (--mig, docs/mig.md): without a daemon
(`gpupool run`, its own lock file per MIG device) and through gpupoold's queue, on the simulated
MIG machines: dgx-a100-mig (8 GPUs as 7 x 1g.10gb), hgx-h200-mig (GPU 0 as 4g.71gb + 3g.71gb,
seven whole GPUs) and a100-mig-mixed."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from harness import GPUPOOL, SOURCE_DIR, Daemon, clean_env, gpupool_json, main, read_if_there, until_exists, wait_until

sys.path.insert(0, os.path.abspath(os.path.join(SOURCE_DIR, "python")))
import gpupool  # noqa: E402

PRINT_ENV = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
             "if k.startswith(('CUDA_', 'GPUPOOL_'))}))")


def mig_devices(fixture):
    """{MIG UUID: (GPU index, the device as `list --json` shows it)}."""
    return {d["uuid"]: (gpu["index"], d) for gpu in gpupool_json("list", "--json", sim=fixture)
            for d in gpu["mig_devices"]}


def env_then_wait(out, go):
    """A job that writes its CUDA_/GPUPOOL_ environment (JSON) to `out`, then waits for `go`."""
    return ["sh", "-c", f"{sys.executable} -c \"{PRINT_ENV}\" > {out}.new && mv {out}.new {out}; {until_exists(go)}"]


def read_json(path):
    return json.loads(wait_until(lambda: read_if_there(path), what=f"{path} being written"))


class StandaloneTest(unittest.TestCase):
    """`gpupool run --mig` without a daemon: the lease directory alone."""

    def setUp(self):
        self.runtime = tempfile.mkdtemp(prefix="gpupool-mig-")
        self.clients = []

    def tearDown(self):
        for lease in self.leases("dgx-a100-mig"):
            try:
                os.kill(lease["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        for client in self.clients:
            client.kill()
            client.wait()
        shutil.rmtree(self.runtime, ignore_errors=True)

    def env(self, sim):
        return clean_env(GPUPOOL_SIM=sim, GPUPOOL_RUNTIME_DIR=self.runtime)

    def gp(self, *args, sim="dgx-a100-mig"):
        return subprocess.run([GPUPOOL, *args], env=self.env(sim), capture_output=True, text=True, timeout=60)

    def hold(self, sim, mig, out, go):
        """`gpupool run --mig MIG` in the background, writing its environment to `out`, until `go`."""
        self.clients.append(subprocess.Popen([GPUPOOL, "run", "-q", "--mig", mig, "--", *env_then_wait(out, go)],
                                             env=self.env(sim)))

    def leases(self, sim):
        return json.loads(self.gp("leases", "--json", sim=sim).stdout)

    def test_the_job_sees_its_mig_device_alone(self):
        proc = self.gp("run", "--mig", "1g.10gb", "--name", "probe", "--", sys.executable, "-c", PRINT_ENV)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        env = json.loads(proc.stdout)
        devices = mig_devices("dgx-a100-mig")
        gpu, device = devices[env["CUDA_VISIBLE_DEVICES"]]
        self.assertEqual(device["profile"], "1g.10gb")
        self.assertEqual(env["GPUPOOL_MIG_UUID"], device["uuid"])
        self.assertEqual(env["GPUPOOL_GPUS"], str(gpu))
        self.assertEqual(env["GPUPOOL_MEM_MIB"], str(device["memory_mib"]))
        self.assertNotIn("XLA_PYTHON_CLIENT_MEM_FRACTION", env)  # the device is the limit
        self.assertIn(f"probe has GPU {gpu} (MIG device {gpu}:{device['index']}, 1g.10gb)", proc.stderr)
        self.assertEqual(self.leases("dgx-a100-mig"), [])

    def test_runs_at_once_get_different_devices_of_one_gpu_first(self):
        go = os.path.join(self.runtime, "go")
        outs = [os.path.join(self.runtime, f"env{i}") for i in range(3)]
        for out in outs:
            self.hold(sim="dgx-a100-mig", mig="1g.10gb", out=out, go=go)
            read_json(out)  # one after the other: each sees the leases before it
        envs = [read_json(out) for out in outs]
        uuids = [env["CUDA_VISIBLE_DEVICES"] for env in envs]
        self.assertEqual(len(set(uuids)), 3, uuids)
        # Best fit: the devices of one GPU are used up before another GPU's are touched.
        self.assertEqual({env["GPUPOOL_GPUS"] for env in envs}, {envs[0]["GPUPOOL_GPUS"]})
        held = {lease["uuid"] for lease in self.leases("dgx-a100-mig")}
        self.assertEqual(held, set(uuids))
        open(go, "w").close()
        for client in self.clients:
            self.assertEqual(client.wait(timeout=60), 0)

    def test_whole_gpus_keep_off_gpus_in_mig_mode(self):
        proc = self.gp("run", "-g", "7", "--", sys.executable, "-c", PRINT_ENV, sim="hgx-h200-mig")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(sorted(json.loads(proc.stdout)["GPUPOOL_GPUS"].split(",")), [str(i) for i in range(1, 8)])
        proc = self.gp("run", "--gpus", "0", "--", "true", sim="hgx-h200-mig")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.strip().splitlines(),
                         ["gpupool: need 1 GPU, but 1 of the allowed GPUs is in MIG mode (GPU 0), where CUDA runs only "
                          "on MIG devices: ask for one with --mig PROFILE"])

    def test_memory_chooses_the_smallest_device_that_holds_it(self):
        proc = self.gp("run", "--mig", "any", "--mem", "40G", "--", sys.executable, "-c", PRINT_ENV, sim="hgx-h200-mig")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        _, device = mig_devices("hgx-h200-mig")[json.loads(proc.stdout)["CUDA_VISIBLE_DEVICES"]]
        self.assertEqual(device["profile"], "3g.71gb")  # fewer compute slices than the 4g of the same memory
        proc = self.gp("run", "--mig", "1c.3g.40gb", "--", sys.executable, "-c", PRINT_ENV, sim="a100-mig-mixed")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        _, device = mig_devices("a100-mig-mixed")[json.loads(proc.stdout)["CUDA_VISIBLE_DEVICES"]]
        self.assertEqual(device["profile"], "1c.3g.40gb")

    def test_a_process_outside_gpupool_takes_its_instances_devices(self):
        devices = {d["profile"]: d for _, d in mig_devices("hgx-h200-mig").values()}
        overlay = os.path.join(self.runtime, "overlay.json")
        busy = {"processes": [{"pid": os.getpid(), "used_memory_mib": 4096, "kind": "compute",
                               "gpu_instance_id": devices["3g.71gb"]["gpu_instance_id"]}]}
        with open(overlay + ".new", "w") as f:
            json.dump({"gpus": {"0": busy}}, f)
        os.rename(overlay + ".new", overlay)
        env = dict(self.env("hgx-h200-mig"), GPUPOOL_SIM_STATE=overlay)
        listed = json.loads(subprocess.run([GPUPOOL, "list", "--json"], env=env, capture_output=True, text=True,
                                           check=True).stdout)
        self.assertEqual(listed[0]["processes"][0]["gpu_instance_id"], devices["3g.71gb"]["gpu_instance_id"])
        proc = subprocess.run([GPUPOOL, "run", "--mig", "any", "--mem", "40G", "--", sys.executable, "-c", PRINT_ENV],
                              env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["CUDA_VISIBLE_DEVICES"], devices["4g.71gb"]["uuid"])
        proc = subprocess.run([GPUPOOL, "run", "--mig", "3g.71gb", "--wait=0", "--", "true"], env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("waiting for a 3g.71gb MIG device: 1 of 1 taken (GPU 0: 1)", proc.stderr)

    def test_a_waiting_mig_request_holds_up_no_gpu_request(self):
        go = os.path.join(self.runtime, "go")
        outs = [os.path.join(self.runtime, f"env{i}") for i in range(2)]
        # hgx-h200-mig has one 3g.71gb device: the first takes it, then the second waits in line for it.
        self.hold(sim="hgx-h200-mig", mig="3g.71gb", out=outs[0], go=go)
        read_json(outs[0])
        self.hold(sim="hgx-h200-mig", mig="3g.71gb", out=outs[1], go=go)
        queue = os.path.join(self.runtime, "queue")
        wait_until(lambda: any(name.endswith(".m1") for name in os.listdir(queue)), what="the MIG request's ticket")
        # A whole GPU and a slice go at once, in front of it, whatever the pass window.
        for args in (["-g", "1"], ["--mem", "10G"]):
            proc = subprocess.run([GPUPOOL, "run", "--wait=0", *args, "--", "true"],
                                  env=dict(self.env("hgx-h200-mig"), GPUPOOL_LINE_PASS="0"), capture_output=True,
                                  text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
        open(go, "w").close()
        for client in self.clients:
            self.assertEqual(client.wait(timeout=60), 0)
        self.assertEqual(read_json(outs[1])["CUDA_VISIBLE_DEVICES"], read_json(outs[0])["CUDA_VISIBLE_DEVICES"])

    def test_compute_instances_of_one_gpu_instance_go_one_at_a_time(self):
        go = os.path.join(self.runtime, "go")
        out = os.path.join(self.runtime, "env")
        # a100-mig-mixed's GPU instance 1 is 1c.3g.40gb + 2c.3g.40gb, which share its memory.
        self.hold(sim="a100-mig-mixed", mig="1c.3g.40gb", out=out, go=go)
        read_json(out)
        proc = self.gp("run", "--wait=0", "--mig", "2c.3g.40gb", "--", "true", sim="a100-mig-mixed")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("waiting for a 2c.3g.40gb MIG device: 1 of 1 taken", proc.stderr)
        open(go, "w").close()
        self.assertEqual(self.clients[0].wait(timeout=60), 0)

    def test_bad_requests_are_one_line(self):
        cases = ((["--mig", "2g.35gb"], "hgx-h200-mig",
                  "gpupool: no allowed GPU has a 2g.35gb MIG device (MIG devices here: 3g.71gb x1, 4g.71gb x1)"),
                 (["--mig", "any"], "hgx-h200", "gpupool: no allowed GPU has a MIG device (MIG devices here: none)"),
                 (["--mig", "1g.10gb", "-g", "2"], "dgx-a100-mig",
                  "gpupool: --mig gives one MIG device: CUDA runs a process on one MIG device only"),
                 (["--mig", "1g.10gb", "--sm", "20"], "dgx-a100-mig",
                  "gpupool: --sm is a share of a whole GPU's multiprocessors; a MIG device has its own"),
                 (["--mig", "any", "--mem", "20G"], "dgx-a100-mig",
                  "gpupool: no allowed GPU has a MIG device of at least 20480 MiB (MIG devices here: 1g.10gb x56)"),
                 (["--mig", ""], "dgx-a100-mig",
                  "gpupool: --mig needs a MIG profile, such as 1g.18gb (as `gpupool list` shows them), or any"))
        for args, sim, message in cases:
            with self.subTest(args=args):
                proc = self.gp("run", *args, "--", "true", sim=sim)
                self.assertEqual(proc.returncode, 1)
                self.assertEqual(proc.stderr.strip().splitlines(), [message])


ACQUIRE = ("import json, os, sys, gpupool; lease = gpupool.acquire(mig=sys.argv[1], mem=sys.argv[2] or None); "
           "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('CUDA_', 'GPUPOOL_'))})); "
           "lease.release()")


def acquire_in_python(env, profile, mem=""):
    """The environment a Python process has after gpupool.acquire(mig=profile, mem=mem)."""
    env = dict(env, PYTHONPATH=os.path.abspath(os.path.join(SOURCE_DIR, "python")), GPUPOOL_CLI=GPUPOOL)
    proc = subprocess.run([sys.executable, "-c", ACQUIRE, profile, mem], env=env, capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"acquire exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


class PythonAcquireTest(unittest.TestCase):
    """gpupool.acquire(mig=...) sets what `gpupool run --mig` sets, with a daemon and without."""

    def check(self, env, fixture):
        got = acquire_in_python(env, "any", "40G")
        gpu, device = mig_devices(fixture)[got["CUDA_VISIBLE_DEVICES"]]
        self.assertEqual(device["profile"], "3g.71gb")
        self.assertEqual(got["GPUPOOL_MIG_UUID"], device["uuid"])
        self.assertEqual(got["GPUPOOL_MEM_MIB"], str(device["memory_mib"]))
        self.assertEqual(got["GPUPOOL_GPU_UUIDS"], gpupool_json("list", "--json", sim=fixture)[gpu]["uuid"])

    def test_through_the_daemon(self):
        with Daemon(sim="hgx-h200-mig") as d:
            self.check(d.env, "hgx-h200-mig")
            self.assertEqual([j["mig_profile"] for j in d.all_jobs()], [""])

    def test_without_a_daemon(self):
        runtime = tempfile.mkdtemp(prefix="gpupool-mig-")
        try:
            self.check(clean_env(GPUPOOL_SIM="hgx-h200-mig", GPUPOOL_RUNTIME_DIR=runtime), "hgx-h200-mig")
        finally:
            shutil.rmtree(runtime, ignore_errors=True)

    def test_bad_requests_raise_before_asking(self):
        for kwargs in ({"mig": "1g.10gb", "n": 2}, {"mig": "1g.10gb", "sm": 20}, {"mig": ""}):
            with self.subTest(**kwargs), self.assertRaises(gpupool.Error):
                gpupool.acquire(socket_path="/nonexistent/gpupoold.sock", **kwargs)


class QueueTest(unittest.TestCase):
    """--mig jobs in gpupoold's queue."""

    def test_jobs_get_devices_of_their_own_and_the_next_waits_for_one(self):
        with Daemon(sim="hgx-h200-mig") as d:
            devices = mig_devices("hgx-h200-mig")
            ids = [d.submit("--mig", "any", "--", *env_then_wait(d.path(f"env{i}"), d.path("go"))) for i in range(3)]
            first, second = (read_json(d.path(f"env{i}")) for i in range(2))
            self.assertEqual(sorted(devices[env["CUDA_VISIBLE_DEVICES"]][1]["profile"] for env in (first, second)),
                             ["3g.71gb", "4g.71gb"])
            for job, env in zip(ids, (first, second)):
                shown = d.show(job)
                self.assertEqual(shown["gpus"], [0])
                self.assertEqual(shown["gpu_uuids"], [env["CUDA_VISIBLE_DEVICES"]])
                self.assertEqual(shown["mig_profile"], "")
            waiting = d.wait_state(ids[2], "queued")
            wait_until(lambda: "2 of 2 taken" in d.show(ids[2])["reason"], what="the wait reason")
            self.assertEqual(d.show(ids[2])["reason"], "waiting for a MIG device: 2 of 2 taken (GPU 0: 2)")
            self.assertEqual(waiting["gpus"], [])
            self.assertEqual(set(d.held_gpus()), {first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]})
            table = d.gp("jobs", check=True).stdout
            self.assertIn("mig:any", table)
            self.assertRegex(d.gp("show", str(ids[0]), check=True).stdout,
                             rf"\nmig device +{first['CUDA_VISIBLE_DEVICES']}\n")
            # A whole-GPU job meanwhile runs beside them, off GPU 0.
            whole = d.submit("--", "sh", "-c", "echo $GPUPOOL_GPUS")
            self.assertNotEqual(d.finish(whole)[0]["gpus"], [0])
            d.touch("go")
            for job in d.finish(*ids):
                self.assertEqual(job["state"], "done")
            third = read_json(d.path("env2"))
            self.assertIn(third["CUDA_VISIBLE_DEVICES"], devices)

    def test_a_restarted_daemon_keeps_the_running_jobs_devices(self):
        with Daemon(sim="hgx-h200-mig") as d:
            held = d.submit("--mig", "3g.71gb", "--", *env_then_wait(d.path("held"), d.path("go")))
            device = read_json(d.path("held"))["CUDA_VISIBLE_DEVICES"]
            d.kill()
            d.start()
            self.assertEqual(d.show(held)["state"], "running")
            self.assertEqual(d.show(held)["gpu_uuids"], [device])
            # The 3g device stays the running job's: another 3g job waits, a 4g one runs.
            waits = d.submit("--mig", "3g.71gb", "--", "true")
            runs = d.submit("--mig", "4g.71gb", "--", "true")
            self.assertEqual(d.finish(runs)[0]["state"], "done")
            self.assertEqual(d.show(waits)["state"], "queued")
            d.touch("go")
            self.assertEqual([j["state"] for j in d.finish(held, waits)], ["done", "done"])

    def test_an_interactive_run_gets_its_device_from_the_daemon(self):
        with Daemon(sim="dgx-a100-mig") as d:
            proc = d.gp("run", "--mig", "1g.10gb", "--", sys.executable, "-c", PRINT_ENV, check=True)
            env = json.loads(proc.stdout)
            _, device = mig_devices("dgx-a100-mig")[env["CUDA_VISIBLE_DEVICES"]]
            self.assertEqual(env["GPUPOOL_MIG_UUID"], device["uuid"])
            self.assertRegex(proc.stderr, r"job \d+ has GPU \d \(MIG device \d:\d, 1g\.10gb\)")

    def test_the_python_client_submits_for_a_mig_device(self):
        with Daemon(sim="hgx-h200-mig") as d, gpupool.Client(d.socket) as client:
            job = client.submit([sys.executable, "-c", PRINT_ENV], mig="any", mem="40G", cwd=d.work)
            (ended,) = d.finish(job)
            self.assertEqual(ended["state"], "done")
            self.assertEqual((ended["mig_profile"], ended["mig_min_mib"]), ("", 40960))
            _, device = mig_devices("hgx-h200-mig")[ended["gpu_uuids"][0]]
            self.assertEqual(device["profile"], "3g.71gb")
            with self.assertRaises(gpupool.Error):
                client.submit(["true"], mig="")

    def test_a_request_no_gpu_can_meet_is_refused_at_submission(self):
        with Daemon(sim="hgx-h200-mig") as d:
            proc = d.gp("submit", "--mig", "7g.141gb", "--", "true")
            self.assertEqual(proc.returncode, 1)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn("no allowed GPU has a 7g.141gb MIG device", proc.stderr)
            proc = d.gp("submit", "-g", "8", "--", "true")
            self.assertEqual(proc.returncode, 1)
            self.assertIn("in MIG mode (GPU 0)", proc.stderr)
            self.assertEqual(d.jobs(finished=True), [])


if __name__ == "__main__":
    main()
