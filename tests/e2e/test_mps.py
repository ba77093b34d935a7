#!/usr/bin/env python3
"""Slices held by CUDA's Multi-Process Service (slice_enforcement = "mps", docs/leases.md, "Slices
that hold"): the daemon starts one MPS control daemon per GPU for the slice jobs on it, gives them
its pipe and their memory limit, keeps a GPU's server to one user at a time, adopts the control
daemons across a restart and tells them to quit once no slice runs on their GPU. NVIDIA's
nvidia-cuda-mps-control is played by tests/e2e/fake-bin/nvidia-cuda-mps-control, which records
what it is told in its control.log."""
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import unittest

from harness import (CAN_ADD_USERS, DAEMON_CONFIG, Daemon, ThrowawayUsers, main, process_gone, read_if_there,
                     until_exists, wait_until)
from test_monitoring import write_overlay

FAKE_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake-bin")
CONTROL_PROGRAM = "nvidia-cuda-mps-control"
MPS_CONFIG = 'slice_enforcement = "mps"\n'
SLICE_MIB = 20480
STARTED = re.compile(r"^\[[^\]]* Control (\d+)\] Starting control daemon using socket ", re.MULTILINE)


def path_with(directory):
    """PATH with directory first: its nvidia-cuda-mps-control is the one the daemon finds."""
    return directory + os.pathsep + os.environ.get("PATH", os.defpath)


def path_without_control_program():
    """PATH without the directories that hold an nvidia-cuda-mps-control (a GPU machine's real one)."""
    return os.pathsep.join(directory for directory in os.environ.get("PATH", os.defpath).split(os.pathsep)
                           if directory and not os.path.exists(os.path.join(directory, CONTROL_PROGRAM)))


def enqueue(d, command, uid=None, **spec):
    """d.enqueue, with an environment free of CUDA_MPS_* (the tests' machine may be an MPS client):
    what a job's environment has of MPS is the daemon's doing."""
    environment = [f"{k}={v}" for k, v in d.env.items() if not k.startswith("CUDA_MPS_")]
    return d.enqueue(command, uid=uid, environment=environment, **spec)


def restart_with(d, setting):
    """Kills gpupoold (-9: its jobs and control daemons run on) and starts it with `setting` added
    to the tests' configuration."""
    d.kill()
    with open(d.config, "w") as f:
        f.write(DAEMON_CONFIG + setting)
    d.start()


def env_job(d, name, until=None, directory=None):
    """A job that writes its environment to DIRECTORY/NAME.env (whole, once: written aside and renamed)
    with E2E_CONTROL_LISTENS=yes added when its MPS pipe has a listening control socket, then waits
    until the file `until` exists in the work directory, when one is named."""
    out = os.path.join(directory or d.work, f"{name}.env")
    script = (f'env > {out}.new; if [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ]; then '
              f"echo E2E_CONTROL_LISTENS=yes >> {out}.new; fi; mv {out}.new {out}")
    if until:
        script += f"; {until_exists(d.path(until))}"
    return ["sh", "-c", script]


def read_env(path):
    """The environment an env_job() wrote, once it has."""
    text = wait_until(lambda: read_if_there(path), what=f"{path} being written")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def mps_variables(env):
    return {k: v for k, v in env.items() if k.startswith("CUDA_MPS_")}


class Control:
    """The MPS control daemon of one GPU of a daemon's machine, as its files show it."""

    def __init__(self, d, gpu_uuid):
        # "GPU-" and 8 hex digits: the fixtures' GPUs differ in them (more where two do not, sched/mps.h)
        root = os.path.join(d.runtime_dir, "mps", gpu_uuid[:12])
        self.gpu_uuid = gpu_uuid
        self.pipe = os.path.join(root, "pipe")
        self.log = os.path.join(root, "log")
        self.pid_file = os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")
        self.socket = os.path.join(self.pipe, "control")

    def log_text(self):
        return read_if_there(os.path.join(self.log, "control.log")) or ""

    def started(self):
        """The PIDs of the control daemons started on this pipe, in order."""
        return [int(pid) for pid in STARTED.findall(self.log_text())]

    def pid(self):
        text = read_if_there(self.pid_file)
        return int(text) if text and text.strip().isdigit() else None

    def client_environment(self, slice_mib=SLICE_MIB):
        """What the daemon adds to an MPS slice job's environment on this GPU."""
        return {"CUDA_MPS_PIPE_DIRECTORY": self.pipe, "CUDA_MPS_LOG_DIRECTORY": self.log,
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={slice_mib}M"}

    def told(self, command):
        """How many times the control daemon was sent command."""
        return self.log_text().count(f"] User did send {command}\n")

    def wait_until_quit(self):
        """Waits until every control daemon started on this pipe has been told to quit and is gone,
        its socket and pid file removed."""
        def quit():
            return (not os.path.exists(self.pid_file) and not os.path.exists(self.socket)
                    and all(process_gone(pid) for pid in self.started()))
        wait_until(quit, what=f"the MPS control daemon of {self.gpu_uuid} quitting")
        started, quits = len(self.started()), self.told("quit")
        if quits < started:
            raise AssertionError(f"{started} control daemons started, {quits} told to quit:\n{self.log_text()}")


class MpsTest(unittest.TestCase):
    def daemon(self, config=MPS_CONFIG, path=None, **kwargs):
        return Daemon(config=config, env={"PATH": path or path_with(FAKE_BIN)}, **kwargs)

    def overlay(self):
        """An empty live overlay of the simulated machine (docs/fixtures.md), removed after the test."""
        scratch = tempfile.mkdtemp(prefix="gpupool-mps-")
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        overlay = os.path.join(scratch, "overlay.json")
        write_overlay(overlay, {})
        return overlay

    def test_slices_of_a_gpu_share_its_control_daemon_which_quits_when_none_runs(self):
        with self.daemon() as d:
            first = enqueue(d, env_job(d, "first", "go-first"), mem_mib=SLICE_MIB, name="first")
            gpu = d.wait_state(first, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            env = read_env(d.path("first.env"))
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], gpu)
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes", "the control daemon listens before the job starts")
            [pid] = control.started()
            self.assertEqual(control.pid(), pid)
            self.assertFalse(process_gone(pid))
            log = control.log_text()
            self.assertIn(f"] Starting control daemon using socket {control.socket}\n", log)
            self.assertIn(f"] Control daemon CUDA_VISIBLE_DEVICES={gpu}\n", log, "started for its GPU alone")

            second = enqueue(d, env_job(d, "second", "go-second"), mem_mib=SLICE_MIB, name="second")
            self.assertEqual(d.wait_state(second, "running")["gpu_uuids"], [gpu], "slices pack onto one GPU")
            env = read_env(d.path("second.env"))
            self.assertEqual((env["CUDA_VISIBLE_DEVICES"], env.get("E2E_CONTROL_LISTENS")), (gpu, "yes"))
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(control.started(), [pid], "the second slice shares the first one's control daemon")

            # A whole GPU is no MPS client, and its GPU gets no control daemon.
            whole = enqueue(d, env_job(d, "whole"), name="whole")
            self.assertEqual(d.finish(whole)[0]["state"], "done")
            env = read_env(d.path("whole.env"))
            self.assertEqual(mps_variables(env), {})
            self.assertNotEqual(env["CUDA_VISIBLE_DEVICES"], gpu)
            self.assertEqual(Control(d, env["CUDA_VISIBLE_DEVICES"]).started(), [])

            d.touch("go-first")
            self.assertEqual(d.finish(first)[0]["state"], "done")
            d.wait_for_samples()
            self.assertFalse(process_gone(pid), "the second slice still runs on the GPU")
            self.assertEqual(control.told("quit"), 0)

            d.touch("go-second")
            self.assertEqual(d.finish(second)[0]["state"], "done")
            control.wait_until_quit()
            self.assertIn(f"Control {pid}] Exit\n", control.log_text())
            self.assertEqual(control.started(), [pid])

    def test_a_restarted_daemon_adopts_the_running_control_daemon(self):
        with self.daemon() as d:
            before = enqueue(d, env_job(d, "before", "go-before"), mem_mib=SLICE_MIB, name="before")
            gpu = d.wait_state(before, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            self.assertEqual(mps_variables(read_env(d.path("before.env"))), control.client_environment())
            [pid] = control.started()

            d.kill()
            self.assertFalse(process_gone(pid), "the control daemon outlives a kill -9 of gpupoold")
            d.start()
            after = enqueue(d, env_job(d, "after", "go-after"), mem_mib=SLICE_MIB, name="after")
            self.assertEqual(d.wait_state(after, "running")["gpu_uuids"], [gpu], "slices pack onto one GPU")
            env = read_env(d.path("after.env"))
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes")
            self.assertEqual(control.started(), [pid], "adopted, not started again")
            self.assertEqual(control.pid(), pid)

            d.touch("go-before")
            self.assertEqual(d.finish(before)[0]["state"], "done")
            d.wait_for_samples()
            self.assertFalse(process_gone(pid), "a slice still runs on the GPU")
            self.assertEqual(control.told("quit"), 0)

            d.touch("go-after")
            self.assertEqual(d.finish(after)[0]["state"], "done")
            control.wait_until_quit()
            self.assertEqual(control.started(), [pid])

    def test_an_adopted_control_daemon_quits_when_its_adopted_slice_ends(self):
        with self.daemon() as d:
            job = enqueue(d, env_job(d, "job", "go"), mem_mib=SLICE_MIB, name="job")
            gpu = d.wait_state(job, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            read_env(d.path("job.env"))
            [pid] = control.started()
            d.kill()
            d.start()
            self.assertEqual(d.job_state(job), "running", "adopted")
            d.wait_for_samples()
            self.assertFalse(process_gone(pid), "its slice still runs")
            self.assertEqual(control.told("quit"), 0)
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            control.wait_until_quit()
            self.assertEqual(control.started(), [pid])

    def test_a_restart_without_mps_quits_the_control_daemon_once_its_clients_end(self):
        with self.daemon() as d:
            job = enqueue(d, env_job(d, "job", "go"), mem_mib=SLICE_MIB, name="job")
            gpu = d.wait_state(job, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            read_env(d.path("job.env"))
            [pid] = control.started()
            # The stand-in's server 4242 has the job's shell as its client, as a real one would.
            with open(os.path.join(control.log, "fake-servers"), "w") as f:
                f.write("4242\n")
            clients = os.path.join(control.log, "fake-clients-4242")
            with open(clients, "w") as f:
                f.write(f"{d.show(job)['pid']}\n")
            restart_with(d, 'slice_enforcement = "watch"\n')
            self.assertEqual(d.job_state(job), "running", "adopted")
            d.wait_for_samples(3)
            self.assertFalse(process_gone(pid), "its client still runs")
            self.assertEqual(control.told("quit"), 0)
            os.remove(clients)
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            control.wait_until_quit()

    def test_a_restart_into_mps_watches_the_slices_that_ran_without_it(self):
        overlay = self.overlay()
        env = {"PATH": path_with(FAKE_BIN), "GPUPOOL_SIM_STATE": overlay}
        with Daemon(config='slice_enforcement = "watch"\n', env=env) as d:
            job = enqueue(d, ["sh", "-c", f"echo $$ > {d.path('job.pid')}; {until_exists(d.path('go'))}"],
                          mem_mib=SLICE_MIB, name="job")
            shown = d.wait_state(job, "running")
            pid = int(wait_until(lambda: read_if_there(d.path("job.pid")), what="the job's pid"))
            # Its process uses its GPU within its slice, as no MPS client: it ran under the watchdog.
            write_overlay(overlay, {shown["gpus"][0]: {"processes": [
                {"pid": pid, "used_memory_mib": 1000, "kind": "compute"}]}})
            d.wait_for_samples(2)
            restart_with(d, MPS_CONFIG)
            d.wait_for_samples(3)
            self.assertEqual(d.job_state(job), "running", "not stopped for being outside MPS")
            self.assertIn(f"job {job} ran without MPS under the daemon before", d.log_text())
            self.assertFalse(os.path.exists(Control(d, shown["gpu_uuids"][0]).socket), "no control daemon for it")
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            # The next slice is held by MPS, as the setting now says.
            after = enqueue(d, env_job(d, "after"), mem_mib=SLICE_MIB, name="after")
            self.assertEqual(d.finish(after)[0]["state"], "done")
            self.assertIn("CUDA_MPS_PIPE_DIRECTORY", read_env(d.path("after.env")))

    def test_a_slice_started_without_mps_beside_an_mps_client_is_watched_after_a_restart_into_mps(self):
        # mps, then watch, then mps again: the first slice is an MPS client of its GPU's control
        # daemon throughout; the second, started under "watch" beside it, is not, though its GPU
        # has a control daemon when the daemon comes back to "mps".
        overlay = self.overlay()
        env = {"PATH": path_with(FAKE_BIN), "GPUPOOL_SIM_STATE": overlay}
        with Daemon(config=MPS_CONFIG, env=env) as d:
            def slice_job(name):
                job = enqueue(d, ["sh", "-c", f"echo $$ > {d.path(name)}.pid; {until_exists(d.path(name + '-go'))}"],
                              mem_mib=SLICE_MIB, name=name)
                shown = d.wait_state(job, "running")
                return job, shown, int(wait_until(lambda: read_if_there(d.path(f"{name}.pid")), what=f"{name}'s pid"))

            client, shown, client_pid = slice_job("client")
            gpu, uuid = shown["gpus"][0], shown["gpu_uuids"][0]
            processes = [{"pid": client_pid, "used_memory_mib": 1000, "kind": "compute", "mps_client": True}]
            write_overlay(overlay, {gpu: {"processes": processes}})
            control = Control(d, uuid)
            with open(os.path.join(control.log, "fake-servers"), "w") as f:
                f.write("4242\n")
            with open(os.path.join(control.log, "fake-clients-4242"), "w") as f:
                f.write(f"{d.show(client)['pid']}\n")
            d.wait_for_samples(2)
            restart_with(d, 'slice_enforcement = "watch"\n')
            watched, shown, watched_pid = slice_job("watched")
            self.assertEqual(shown["gpus"], [gpu], "beside the MPS client")
            processes.append({"pid": watched_pid, "used_memory_mib": 1000, "kind": "compute"})
            write_overlay(overlay, {gpu: {"processes": processes}})
            d.wait_for_samples(2)
            restart_with(d, MPS_CONFIG)
            d.wait_for_samples(3)
            self.assertTrue(os.path.exists(control.socket), "the MPS client's control daemon runs")
            self.assertEqual((d.job_state(client), d.job_state(watched)), ("running", "running"),
                             "neither is stopped for being outside MPS")
            self.assertIn(f"job {watched} ran without MPS under the daemon before (it was started without MPS)",
                          d.log_text())
            self.assertNotIn(f"job {client} ran without MPS", d.log_text())
            d.touch("watched-go")
            self.assertEqual(d.finish(watched)[0]["state"], "done")
            os.remove(os.path.join(control.log, "fake-clients-4242"))
            d.touch("client-go")
            self.assertEqual(d.finish(client)[0]["state"], "done")
            control.wait_until_quit()

    def test_auto_without_the_control_program_leaves_slices_to_the_watchdog(self):
        path = path_without_control_program()
        if not (shutil.which("sh", path=path) and shutil.which("env", path=path)):
            self.skipTest(f"{CONTROL_PROGRAM} is installed beside sh: PATH cannot leave it out")
        with self.daemon(config="", path=path) as d:
            job = enqueue(d, env_job(d, "slice"), mem_mib=SLICE_MIB, name="slice")
            ended = d.finish(job)[0]
            self.assertEqual(ended["state"], "done")
            env = read_env(d.path("slice.env"))
            self.assertEqual(mps_variables(env), {})
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], ended["gpu_uuids"][0])
            self.assertEqual(env["CUPY_GPU_MEMORY_LIMIT"], str(SLICE_MIB << 20), "a slice, with the frameworks' limits")
            self.assertFalse(os.path.exists(Control(d, ended["gpu_uuids"][0]).socket))

    def test_auto_uses_mps_where_the_control_program_is_found(self):
        with self.daemon(config="") as d:
            job = enqueue(d, env_job(d, "slice"), mem_mib=SLICE_MIB, name="slice")
            ended = d.finish(job)[0]
            self.assertEqual(ended["state"], "done")
            control = Control(d, ended["gpu_uuids"][0])
            env = read_env(d.path("slice.env"))
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes")
            control.wait_until_quit()
            self.assertEqual(len(control.started()), 1)

    def test_a_control_daemon_that_does_not_start_fails_the_slice_job(self):
        scratch = tempfile.mkdtemp(prefix="gpupool-mps-")
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        refusing = os.path.join(scratch, CONTROL_PROGRAM)
        with open(refusing, "w") as f:
            f.write("#!/bin/sh\necho 'E2E: this control daemon refuses to start' >&2\nexit 1\n")
        os.chmod(refusing, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.chmod(scratch, 0o755)
        with self.daemon(path=path_with(scratch)) as d:
            job = enqueue(d, ["sh", "-c", f"touch {d.path('ran')}"], mem_mib=SLICE_MIB, name="slice")
            ended = d.finish(job)[0]
            self.assertEqual(ended["state"], "failed")
            self.assertTrue(ended["reason"].startswith("could not start:"), ended["reason"])
            self.assertIn("MPS", ended["reason"])
            self.assertIn("this control daemon refuses to start", ended["reason"], "the program's own words")
            self.assertFalse(os.path.exists(d.path("ran")))
            # An interactive one fails the same way: failed, not done, and its program never runs.
            proc = d.gp("run", "--mem", "20G", "--", "sh", "-c", f"touch {d.path('run-ran')}")
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("this control daemon refuses to start", proc.stderr)
            self.assertFalse(os.path.exists(d.path("run-ran")))
            run_job = [j for j in d.all_jobs() if j["kind"] == "interactive"]
            self.assertEqual([j["state"] for j in run_job], ["failed"])
            # Whole GPUs need no MPS.
            whole = enqueue(d, ["sh", "-c", f"touch {d.path('whole-ran')}"], name="whole")
            self.assertEqual(d.finish(whole)[0]["state"], "done")
            self.assertTrue(os.path.exists(d.path("whole-ran")))

    def test_the_server_limit_is_the_largest_slice_and_a_control_with_clients_is_not_quit(self):
        with self.daemon() as d:
            first = enqueue(d, env_job(d, "first", "go-first"), mem_mib=SLICE_MIB, name="first")
            gpu = d.wait_state(first, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            read_env(d.path("first.env"))
            self.assertEqual(control.told(f"set_default_device_pinned_mem_limit 0 {SLICE_MIB}M"), 1)
            # A server runs (a client connected): a larger slice raises its limit too.
            with open(os.path.join(control.log, "fake-servers"), "w") as f:
                f.write("424242\n")
            with open(os.path.join(control.log, "fake-clients-424242"), "w") as f:
                f.write("434343\n")
            larger = enqueue(d, env_job(d, "larger"), mem_mib=2 * SLICE_MIB, name="larger")
            self.assertEqual(d.finish(larger)[0]["gpu_uuids"], [gpu])
            self.assertEqual(control.told(f"set_default_device_pinned_mem_limit 0 {2 * SLICE_MIB}M"), 1)
            self.assertEqual(control.told(f"set_device_pinned_mem_limit 424242 0 {2 * SLICE_MIB}M"), 1)
            self.assertEqual(mps_variables(read_env(d.path("larger.env"))),
                             control.client_environment(2 * SLICE_MIB))
            # Every slice has ended, but the server has a client still: no quit until it has none.
            d.touch("go-first")
            self.assertEqual(d.finish(first)[0]["state"], "done")
            d.wait_for_samples()
            self.assertEqual(control.told("quit"), 0)
            self.assertGreater(control.told("get_client_list 424242"), 0, "the daemon asked")
            os.unlink(os.path.join(control.log, "fake-clients-424242"))
            control.wait_until_quit()

    def test_a_control_daemon_that_died_is_started_again_for_the_next_slice(self):
        with self.daemon() as d:
            first = enqueue(d, env_job(d, "first", "go"), mem_mib=SLICE_MIB, name="first")
            gpu = d.wait_state(first, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            read_env(d.path("first.env"))
            [pid] = control.started()
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: process_gone(pid), what="the control daemon gone")
            second = enqueue(d, env_job(d, "second", "go"), mem_mib=SLICE_MIB, name="second")
            self.assertEqual(d.wait_state(second, "running")["gpu_uuids"], [gpu])
            env = read_env(d.path("second.env"))
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes", "a control daemon listens again")
            self.assertEqual(len(control.started()), 2)
            self.assertIn("no longer answers: starting it again", d.log_text())
            d.touch("go")
            self.assertEqual([j["state"] for j in d.finish(first, second)], ["done", "done"])
            wait_until(lambda: control.pid() is None and all(process_gone(p) for p in control.started()),
                       what="the second control daemon quitting")
            self.assertEqual(control.told("quit"), 1)

    def test_a_planted_mps_directory_is_moved_aside_not_used(self):
        scratch = tempfile.mkdtemp(prefix="gpupool-mps-")
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        os.chmod(scratch, 0o777)
        with self.daemon() as d:
            planted = os.path.join(d.runtime_dir, "mps")
            os.symlink(scratch, planted)  # what any user may do in the 1777 runtime directory
            job = enqueue(d, env_job(d, "job"), mem_mib=SLICE_MIB, name="job")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            self.assertFalse(os.path.islink(planted))
            self.assertTrue(os.path.isdir(planted))
            self.assertEqual(stat.S_IMODE(os.stat(planted).st_mode), 0o755)
            aside = [name for name in os.listdir(d.runtime_dir) if name.startswith("mps.not-ours-")]
            self.assertEqual(len(aside), 1, os.listdir(d.runtime_dir))
            self.assertTrue(os.path.islink(os.path.join(d.runtime_dir, aside[0])))
            self.assertEqual(os.listdir(scratch), [], "nothing made through the link")
            self.assertEqual(stat.S_IMODE(os.stat(scratch).st_mode), 0o777, "its target's mode untouched")
            self.assertIn("was not gpupoold's own directory: moved aside", d.log_text())
            env = read_env(d.path("job.env"))
            self.assertTrue(env["CUDA_MPS_PIPE_DIRECTORY"].startswith(planted + "/"))
            Control(d, env["CUDA_VISIBLE_DEVICES"]).wait_until_quit()


    def test_a_compute_share_is_the_clients_thread_percentage_and_shown(self):
        with self.daemon() as d:
            job = int(d.gp("submit", "--mem", "20G", "--sm", "25", "--name", "shared", "--",
                           *env_job(d, "shared", "go"), check=True).stdout)
            gpu = d.wait_state(job, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            env = read_env(d.path("shared.env"))
            self.assertEqual(mps_variables(env),
                             dict(control.client_environment(), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25"))
            self.assertEqual(d.show(job)["sm_percent"], 25)
            self.assertIn("1x20G/25%", d.gp("jobs", check=True).stdout)
            self.assertIn("20480 MiB each (shared), 25 % of the multiprocessors", d.gp("show", str(job), check=True).stdout)
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            control.wait_until_quit()

    def test_an_interactive_slice_is_an_mps_client_too(self):
        with self.daemon() as d:
            proc = d.gp("run", "--mem", "20G", "--sm", "50", "-q", "--", *env_job(d, "interactive"), check=True)
            self.assertEqual(proc.stderr, "")
            env = read_env(d.path("interactive.env"))
            control = Control(d, env["CUDA_VISIBLE_DEVICES"])
            self.assertEqual(mps_variables(env),
                             dict(control.client_environment(), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50"))
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes")
            control.wait_until_quit()
            # A slice of two GPUs reaches no single control daemon: the watchdog's alone.
            d.gp("run", "-g", "2", "--mem", "20G", "-q", "--", *env_job(d, "two"), check=True)
            self.assertEqual(mps_variables(read_env(d.path("two.env"))), {})

    def test_a_slice_process_outside_mps_ends_its_job(self):
        overlay = self.overlay()
        with Daemon(config=MPS_CONFIG, env={"PATH": path_with(FAKE_BIN), "GPUPOOL_SIM_STATE": overlay}) as d:
            jobs = {name: enqueue(d, ["sh", "-c", f"echo $$ > {d.path(name)}.pid; exec sleep 600"], mem_mib=SLICE_MIB,
                                  name=name) for name in ("client", "outside")}
            shown = {name: d.wait_state(job, "running") for name, job in jobs.items()}
            pids = {name: int(wait_until(lambda n=name: read_if_there(d.path(f"{n}.pid")), what=f"{name}'s pid"))
                    for name in jobs}
            gpu = shown["client"]["gpus"][0]
            self.assertEqual(shown["outside"]["gpus"], [gpu], "slices pack onto one GPU")
            # Both use memory within their slices; one of them is no MPS client.
            write_overlay(overlay, {gpu: {"processes": [
                {"pid": pids["client"], "used_memory_mib": 1000, "kind": "compute", "mps_client": True},
                {"pid": pids["outside"], "used_memory_mib": 1000, "kind": "compute"}]}})
            ended = d.finish(jobs["outside"])[0]
            self.assertEqual(ended["state"], "failed")
            self.assertEqual(ended["reason"], f"its process {pids['outside']} used GPU {gpu} outside MPS, "
                                              "where its slice's memory limit does not hold")
            d.wait_for_samples()
            self.assertEqual(d.job_state(jobs["client"]), "running", "an MPS client runs on")
            listed = d.gp_json("list", "--json")
            processes = {p["pid"]: p for g in listed if g["index"] == gpu for p in g["processes"]}
            self.assertTrue(processes[pids["client"]]["mps_client"])
            d.request({"op": "cancel", "ids": [jobs["client"]]})
            d.finish(jobs["client"])
            Control(d, shown["client"]["gpu_uuids"][0]).wait_until_quit()

    def test_a_fatal_fault_in_one_client_is_named_in_its_neighbours_ends(self):
        self.fault_in_one_client(seen_by_the_watchdog=True)

    def test_a_fault_before_the_watchdog_saw_the_clients_is_named_too(self):
        """The jobs' own processes are known from their start: no sample need have listed them."""
        self.fault_in_one_client(seen_by_the_watchdog=False)

    def fault_in_one_client(self, seen_by_the_watchdog):
        overlay = self.overlay()
        with Daemon(config=MPS_CONFIG, env={"PATH": path_with(FAKE_BIN), "GPUPOOL_SIM_STATE": overlay}) as d:
            # Each writes its pid, waits for `go`, then fails as a client of a faulted server does;
            # the neighbour that may retry succeeds on its second attempt.
            def client(name, code):
                return ["sh", "-c", f"[ -e {d.path(name)}.once ] && exit 0; touch {d.path(name)}.once; "
                                    f"echo $$ > {d.path(name)}.pid; {until_exists(d.path('go'))}; exit {code}"]
            jobs = {"culprit": enqueue(d, client("culprit", 4), mem_mib=SLICE_MIB, name="culprit"),
                    "neighbour": enqueue(d, client("neighbour", 3), mem_mib=SLICE_MIB, name="neighbour"),
                    "retried": enqueue(d, client("retried", 3), mem_mib=SLICE_MIB, name="retried", retries=1)}
            shown = {name: d.wait_state(job, "running") for name, job in jobs.items()}
            pids = {name: int(wait_until(lambda n=name: read_if_there(d.path(f"{n}.pid")), what=f"{name}'s pid"))
                    for name in jobs}
            gpu = shown["culprit"]["gpus"][0]
            self.assertEqual({s["gpus"][0] for s in shown.values()}, {gpu}, "slices pack onto one GPU")
            if seen_by_the_watchdog:
                write_overlay(overlay, {gpu: {"processes": [
                    {"pid": pid, "used_memory_mib": 1000, "kind": "compute", "mps_client": True}
                    for pid in pids.values()]}})
                d.wait_for_samples(3)  # the watchdog has seen whose the clients are
            control = Control(d, shown["culprit"]["gpu_uuids"][0])
            # What the server writes on an MMU fault (as recorded on an H100 machine, driver 580).
            lines = [f"Client {{PID: {pids['culprit']}, Context: 1}} encountered a fatal GPU error.",
                     "Server is handling a fatal GPU error.",
                     "The following client process have a sticky error set:",
                     *[str(pid) for pid in pids.values()],
                     f"Client {{PID: {pids['culprit']}, Context ID: 1}} exiting. Number of active client contexts is 2."]
            with open(os.path.join(control.log, "server.log"), "a") as log:
                log.writelines(f"[2026-12-06 09:28:35.130 Server   489] {line}\n" for line in lines)
            d.touch("go")
            ended = {name: job for name, job in zip(jobs, d.finish(*jobs.values()))}
            self.assertEqual((ended["culprit"]["state"], ended["culprit"]["reason"]),
                             ("failed", f"a fatal GPU fault in its process {pids['culprit']} ended every MPS client "
                                        "on its GPU (exit code 4)"))
            self.assertEqual((ended["neighbour"]["state"], ended["neighbour"]["reason"]),
                             ("failed", f"ended by a fault in job {jobs['culprit']} on the same GPU (exit code 3)"))
            self.assertEqual((ended["retried"]["state"], ended["retried"]["attempts"]), ("done", 2))

    def test_a_compute_share_that_nothing_would_hold_is_refused_in_one_line(self):
        with self.daemon() as d:
            proc = d.gp("submit", "--sm", "25", "--", "true")
            self.assertEqual((proc.returncode, proc.stderr),
                             (1, "gpupool: --sm needs --mem: a compute share is a share of a GPU that slices share\n"))
            proc = d.gp("submit", "-g", "2", "--mem", "20G", "--sm", "25", "--", "true")
            self.assertEqual((proc.returncode, proc.stderr),
                             (1, "gpupool: --sm needs MPS, which holds a slice of one GPU only\n"))
            proc = d.gp("submit", "--mem", "20G", "--sm", "101", "--", "true")
            self.assertEqual(proc.returncode, 2, proc.stderr)
        with self.daemon(config='slice_enforcement = "watch"\n') as d:
            proc = d.gp("submit", "--mem", "20G", "--sm", "25", "--", "true")
            self.assertEqual(proc.returncode, 1)
            self.assertIn("--sm needs MPS, which this gpupoold does not use", proc.stderr)
            self.assertEqual(d.jobs(finished=True), [], "nothing stored")
        # Without a daemon nothing would hold it.
        d = Daemon()
        try:
            proc = d.gp("run", "--mem", "1G", "--sm", "10", "--", "true")
            self.assertEqual((proc.returncode, proc.stderr),
                             (1, "gpupool: --sm needs gpupoold, which holds a slice's compute share with CUDA MPS; "
                                 "no daemon is running\n"))
        finally:
            shutil.rmtree(d.root, ignore_errors=True)


@unittest.skipUnless(CAN_ADD_USERS, "needs root, useradd, groupadd and setpriv to create throwaway users")
class MpsUsersTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        suffix = os.urandom(3).hex()
        cls.alice = cls.add_user(f"gpt_mps_alice_{suffix}")
        cls.bob = cls.add_user(f"gpt_mps_bob_{suffix}")

    def test_a_gpus_mps_server_serves_one_user_at_a_time(self):
        # One GPU: bob's slice has nowhere else to go.
        with Daemon(sim="h200-1", config=MPS_CONFIG, mode=0o755, env={"PATH": path_with(FAKE_BIN)}) as d:
            homes, uids = {}, {}
            for user in (self.alice, self.bob):
                homes[user] = d.path(user)
                uids[user] = pwd.getpwnam(user).pw_uid
                os.mkdir(homes[user], 0o700)
                os.chown(homes[user], uids[user], -1)

            def submit(user, name, until):
                return enqueue(d, env_job(d, name, until, directory=homes[user]), uid=uids[user], cwd=homes[user],
                               mem_mib=SLICE_MIB, name=name)

            alices = submit(self.alice, "alices", "go-alice")
            gpu = d.wait_state(alices, "running")["gpu_uuids"][0]
            control = Control(d, gpu)
            env = read_env(os.path.join(homes[self.alice], "alices.env"))
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes", "alice's job reaches the control's socket")

            bobs = submit(self.bob, "bobs", "go-bob")

            def waiting_for_mps():
                shown = d.show(bobs)
                return shown if shown["state"] == "queued" and "one user at a time" in shown["reason"] else None
            shown = wait_until(waiting_for_mps, what="bob's slice waiting for the GPU's MPS server")
            self.assertIn("MPS", shown["reason"])
            self.assertIn("one user at a time", d.gp("show", str(bobs), check=True).stdout)
            self.assertEqual(d.job_state(alices), "running")

            d.touch("go-alice")
            self.assertEqual(d.finish(alices)[0]["state"], "done")
            self.assertEqual(d.wait_state(bobs, "running")["gpu_uuids"], [gpu])
            env = read_env(os.path.join(homes[self.bob], "bobs.env"))
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], gpu)
            self.assertEqual(mps_variables(env), control.client_environment())
            self.assertEqual(env.get("E2E_CONTROL_LISTENS"), "yes", "bob's job reaches the control's socket")
            self.assertIsNotNone(control.pid(), "bob's slice has a control daemon")

            d.touch("go-bob")
            self.assertEqual(d.finish(bobs)[0]["state"], "done")
            control.wait_until_quit()

    def test_mps_clients_that_outlived_their_job_keep_the_server_for_their_user(self):
        # A process of alice's, listed by NVML as an MPS client of the one GPU but in no job of
        # gpupool's (say, left behind by her job): bob's MPS slice waits until it has gone.
        scratch = tempfile.mkdtemp(prefix="gpupool-mps-")
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        overlay = os.path.join(scratch, "overlay.json")
        write_overlay(overlay, {})
        lingering = subprocess.Popen(["setpriv", f"--reuid={pwd.getpwnam(self.alice).pw_uid}",
                                      f"--regid={pwd.getpwnam(self.alice).pw_gid}", "--clear-groups", "--",
                                      "sleep", "600"])
        self.addCleanup(lambda: lingering.poll() is None and lingering.kill())
        write_overlay(overlay, {0: {"processes": [{"pid": lingering.pid, "used_memory_mib": 500, "kind": "compute",
                                                   "mps_client": True}]}})
        with Daemon(sim="h200-1", config=MPS_CONFIG, mode=0o755,
                    env={"PATH": path_with(FAKE_BIN), "GPUPOOL_SIM_STATE": overlay}) as d:
            home = d.path(self.bob)
            os.mkdir(home, 0o700)
            os.chown(home, pwd.getpwnam(self.bob).pw_uid, -1)
            bobs = enqueue(d, env_job(d, "bobs", "go-bob", directory=home), uid=pwd.getpwnam(self.bob).pw_uid,
                           cwd=home, mem_mib=SLICE_MIB, name="bobs")

            def waiting_for_mps():
                shown = d.show(bobs)
                return shown if shown["state"] == "queued" and "MPS" in shown["reason"] else None
            shown = wait_until(waiting_for_mps, what="bob's slice waiting for the GPU's MPS server")
            self.assertIn(f"serves {self.alice}'s processes outside gpupool's jobs", shown["reason"])

            lingering.kill()
            lingering.wait()
            write_overlay(overlay, {})
            d.wait_state(bobs, "running")
            d.touch("go-bob")
            self.assertEqual(d.finish(bobs)[0]["state"], "done")


if __name__ == "__main__":
    main()
