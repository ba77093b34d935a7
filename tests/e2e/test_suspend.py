#!/usr/bin/env python3
"""Suspend and resume (docs/suspend.md): gpupoold checkpoints a running job's GPU processes through
the CUDA driver's checkpoint API (here the simulated libcuda.so.1, whose per-process states are
files in GPUPOOL_SIM_CUDA_STATE), lets its GPU go to another job, and restores it there once the
GPU is free; what the driver refuses is undone, or ends the job with the driver's error; a
restarted daemon keeps a suspended job."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import Daemon, main, until_exists, wait_until
from test_monitoring import write_overlay

GPU_MIB = 9316  # what the 8 GiB PyTorch process of the H200 runs listed


class SuspendTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-suspend-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        self.cuda = os.path.join(self.scratch, "cuda")
        os.mkdir(self.cuda)
        write_overlay(self.overlay, {})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def daemon(self, config=""):
        # One GPU: another job can only run while the first is suspended.
        d = Daemon(sim="h200-1", config=config,
                   env={"GPUPOOL_SIM_STATE": self.overlay, "GPUPOOL_SIM_CUDA_STATE": self.cuda})
        d.protocol = 3  # which knows the suspended state
        return d

    def driver_state(self, pid):
        return _read(os.path.join(self.cuda, str(pid))) or "running"

    def fail_next(self, step, code="801"):
        with open(os.path.join(self.cuda, f"fail-{step}"), "w") as f:
            f.write(code)

    def gpu_job(self, d, name, **spec):
        """A job whose process the simulated GPU lists with GPU_MIB, running until `name`-go exists;
        returns (id, pid) once the daemon has sampled the process on the GPU."""
        job = d.enqueue(["sh", "-c", f"echo $$ > {d.path(name)}.pid; {until_exists(d.path(name + '-go'))}"], name=name,
                        **spec)
        d.wait_state(job, "running")
        pid = int(wait_until(lambda: _read(d.path(f"{name}.pid")), what=f"{name}'s pid"))
        # Only the process: the simulated GPU's memory in use would stay while it is checkpointed.
        write_overlay(self.overlay, {0: {"processes": [{"pid": pid, "used_memory_mib": GPU_MIB, "kind": "compute"}]}})
        d.wait_for_samples(2)
        return job, pid

    def events(self, d, job):
        return [(e["kind"], e["detail"]) for e in
                map(json.loads, d.gp("events", "--job", str(job), "--json", check=True).stdout.splitlines())
                if e["kind"].startswith("job_suspend") or e["kind"] == "job_resumed"]

    def test_a_suspended_job_lets_another_use_its_gpu_and_resumes_intact(self):
        with self.daemon() as d:
            first, pid = self.gpu_job(d, "first")
            suspended = d.gp("suspend", str(first), check=True)
            self.assertRegex(suspended.stdout, rf"^suspended job {first} in [0-9.]+ s: 9 GiB of GPU memory of 1 process "
                                               r"in host memory, suspended by root\n$")
            self.assertEqual(self.driver_state(pid), "checkpointed")
            # The helper's lock on the process (kept while it runs; gone once it has ended).
            lock_file = os.path.join(d.state_dir, "checkpoints", str(pid))
            self.assertTrue(os.path.exists(lock_file))
            shown = d.show(first)
            self.assertEqual((shown["state"], shown["reason"]), ("suspended", "suspended by root"))
            self.assertEqual((shown["suspension"]["pids"], shown["suspension"]["host_mib"]), ([pid], GPU_MIB))
            self.assertRegex(d.gp("show", str(first), check=True).stdout,
                             rf"\nsuspended +since .+: 9 GiB of GPU memory of 1 process in host memory, suspended by "
                             rf"root; pids {pid}\n")
            self.assertEqual(d.held_gpus(), [])
            self.assertIn("suspended", d.gp("jobs", check=True).stdout)

            # The GPU is another job's meanwhile; the suspended one waits for it to resume.
            second = d.enqueue(["sh", "-c", until_exists(d.path("second-go"))], name="second")
            d.wait_state(second, "running")
            resuming = d.gp("resume", str(first), "--no-wait", check=True)
            self.assertEqual(resuming.stdout, f"resuming job {first}\n")
            self.assertEqual(d.show(first)["reason"], "waiting for its GPUs to resume")
            d.wait_for_samples(2)
            self.assertEqual((d.job_state(first), self.driver_state(pid)), ("suspended", "checkpointed"))
            d.touch("second-go")
            self.assertEqual(d.finish(second)[0]["state"], "done")

            resumed = d.wait_state(first, "running")
            self.assertEqual((resumed["reason"], resumed.get("suspension")), ("", None))
            self.assertEqual(self.driver_state(pid), "running")
            self.assertEqual(len(d.held_gpus()), 1)
            self.assertEqual([kind for kind, _ in self.events(d, first)], ["job_suspended", "job_resumed"])
            # The same process, and the same attempt, ends the job.
            d.touch("first-go")
            ended = d.finish(first)[0]
            self.assertEqual((ended["state"], ended["attempts"]), ("done", 1))
            wait_until(lambda: not os.path.exists(lock_file), what="the ended process's lock file removed")

    def test_resume_waits_for_its_gpu_and_says_when_it_runs_again(self):
        with self.daemon() as d:
            first, pid = self.gpu_job(d, "first")
            d.gp("suspend", str(first), check=True)
            second = d.enqueue(["sh", "-c", until_exists(d.path("second-go"))], name="second")
            d.wait_state(second, "running")
            waiting = d.background("resume", str(first), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_until(lambda: d.show(first)["reason"] == "waiting for its GPUs to resume", what="the resume queued")
            d.touch("second-go")
            out, err = waiting.communicate(timeout=60)
            self.assertEqual(waiting.returncode, 0, err)
            self.assertRegex(out, rf"^resumed job {first} on GPU 0 in [0-9.]+ s\n$")
            self.assertIn(f"job {first} is waiting for its GPUs to resume (GPU 0)", err)
            d.touch("first-go")
            self.assertEqual(d.finish(first)[0]["state"], "done")

    def test_a_checkpoint_the_driver_refuses_is_undone_and_the_job_runs_on(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            self.fail_next("checkpoint")
            refused = d.gp("suspend", str(job))
            self.assertEqual(refused.returncode, 1)
            why = f"checkpoint failed: pid {pid}: CUDA_ERROR_NOT_SUPPORTED"
            self.assertEqual(refused.stderr, f"gpupool: job {job} not suspended: {why}\n")
            self.assertEqual(self.driver_state(pid), "running")  # locked, then unlocked
            self.assertEqual((d.job_state(job), len(d.held_gpus())), ("running", 1))
            self.assertEqual(self.events(d, job), [("job_suspend_failed", why)])
            os.remove(os.path.join(self.cuda, "fail-checkpoint"))
            d.gp("suspend", str(job), check=True)  # and may be suspended once the driver allows
            d.gp("resume", str(job), check=True)
            d.touch("job-go")
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def test_a_restore_the_driver_refuses_ends_the_job_with_its_error(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            d.gp("suspend", str(job), check=True)
            self.fail_next("restore")
            failed = d.gp("resume", str(job))
            self.assertEqual(failed.returncode, 1)
            [ended] = d.finish(job)
            why = f"restore failed: pid {pid}: CUDA_ERROR_NOT_SUPPORTED"
            self.assertEqual((ended["state"], ended["reason"]), ("failed", why))
            # Its processes are ended as a cancel ends them (the exit status says how).
            self.assertRegex(failed.stderr, rf"gpupool: job {job} failed(\(\d+\))?: {why}\n$")

    def test_what_cannot_be_suspended_is_refused_before_anything_is_touched(self):
        with self.daemon('suspend_host_memory_mb = 8192\n') as d:
            job, pid = self.gpu_job(d, "job")
            refused = d.gp("suspend", str(job))
            self.assertEqual((refused.returncode, refused.stderr),
                             (1, f"gpupool: job {job} holds 9 GiB of GPU memory, and suspended jobs hold 0 GiB of the "
                                 "8 GiB that suspend_host_memory_mb allows them\n"))
            self.assertEqual(self.driver_state(pid), "running")
            queued_behind = d.enqueue(["true"], name="behind")
            refused = d.gp("suspend", str(queued_behind))
            self.assertEqual(refused.stderr, f"gpupool: job {queued_behind} is queued, not running\n")
            resumed = d.gp("resume", str(job))
            self.assertEqual(resumed.stderr, f"gpupool: job {job} is running, not suspended\n")
            d.touch("job-go")
            self.assertEqual([j["state"] for j in d.finish(job, queued_behind)], ["done", "done"])

    def test_a_job_whose_processes_hold_no_gpu_state_is_not_suspended(self):
        with self.daemon() as d:
            job = d.enqueue(["sh", "-c", until_exists(d.path("go"))])
            d.wait_state(job, "running")
            d.wait_for_samples(2)
            refused = d.gp("suspend", str(job))
            self.assertEqual(refused.returncode, 1)
            self.assertIn(f"no process of job {job} holds GPU state yet", refused.stderr)
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def test_a_restarted_daemon_keeps_a_suspended_job_and_resumes_it(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            d.gp("suspend", str(job), check=True)
            self.assertEqual(d.stop(), 0)
            d.start()
            shown = d.show(job)
            self.assertEqual((shown["state"], shown["suspension"]["pids"]), ("suspended", [pid]))
            self.assertEqual(d.held_gpus(), [])
            d.gp("resume", str(job), check=True)
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("job-go")
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def hang_after(self, step):
        """The next `step` call does its work, then waits until the returned file goes."""
        path = os.path.join(self.cuda, f"fail-{step}")
        with open(path, "w") as f:
            f.write("hang-after")
        return path

    def test_a_suspend_the_daemon_was_killed_during_goes_on_after_a_restart(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            hang = self.hang_after("checkpoint")
            d.gp("suspend", str(job), "--no-wait", check=True)
            wait_until(lambda: self.driver_state(pid) == "checkpointed", what="the checkpoint done")
            self.assertEqual((d.job_state(job), d.show(job)["reason"]), ("running", "being suspended by root"))
            d.kill()  # before the checkpoint call returned; its helper lives on, stuck in the driver
            d.start()
            # The restarted daemon's first call waits for the one under way on the same process.
            d.wait_for_samples(2)
            self.assertEqual((d.job_state(job), d.show(job)["reason"]), ("running", "being suspended by root"))
            os.remove(hang)
            suspended = d.wait_state(job, "suspended")
            self.assertEqual((suspended["reason"], suspended["suspension"]["pids"]), ("suspended by root", [pid]))
            self.assertEqual((d.held_gpus(), self.driver_state(pid)), ([], "checkpointed"))
            self.assertIn("job_suspended", [kind for kind, _ in self.events(d, job)])
            d.gp("resume", str(job), check=True)
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("job-go")
            ended = d.finish(job)[0]
            self.assertEqual((ended["state"], ended["attempts"]), ("done", 1))

    def test_a_resume_the_daemon_was_killed_during_goes_on_after_a_restart(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            d.gp("suspend", str(job), check=True)
            hang = self.hang_after("restore")
            d.gp("resume", str(job), "--no-wait", check=True)
            wait_until(lambda: self.driver_state(pid) == "locked", what="the restore done")
            self.assertEqual((d.job_state(job), d.show(job)["reason"]), ("suspended", "resuming"))
            d.kill()  # restored, not yet unlocked
            os.remove(hang)
            d.start()
            resumed = d.wait_state(job, "running")
            self.assertEqual((resumed["reason"], resumed.get("suspension")), ("", None))
            self.assertEqual((len(d.held_gpus()), self.driver_state(pid)), (1, "running"))
            # Its GPU is its own again: another job waits for it.
            other = d.enqueue(["true"], name="other")
            d.wait_for_samples(2)
            self.assertEqual(d.job_state(other), "queued")
            d.touch("job-go")
            self.assertEqual(d.finish(job, other)[0]["state"], "done")

    def test_drain_suspend_empties_a_gpu_and_its_job_resumes_when_the_gpu_does(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            drained = d.gp("drain", "--gpu", "0", "--suspend", "--reason", "swap fan", check=True)
            self.assertRegex(drained.stdout, rf"^suspended job {job} in [0-9.]+ s: 9 GiB of GPU memory of 1 process in "
                                             r"host memory, suspended by root; waiting to resume\ndrained GPU 0: its jobs "
                                             r"are suspended, to resume there;")
            self.assertEqual((d.held_gpus(), self.driver_state(pid)), ([], "checkpointed"))
            self.assertEqual(d.show(job)["reason"], "suspended by root; resumes when its GPUs are free")
            d.wait_for_samples(2)
            self.assertEqual(d.job_state(job), "suspended")  # the GPU is drained
            d.gp("resume", "--gpu", "0", check=True)
            d.wait_state(job, "running")
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("job-go")
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def test_an_idle_job_is_suspended_while_another_waits_and_resumes_behind_it(self):
        config = 'idle_suspend_after = "1s"\n[monitor]\nidle_flag_after = "1s"\n'
        with self.daemon(config) as d:
            idle, pid = self.gpu_job(d, "idle")  # the simulated GPU is at 0 % utilisation
            wait_until(lambda: (d.show(idle).get("usage") or {}).get("idle_since"), what="the job flagged idle")
            d.wait_for_samples(2)
            self.assertEqual(d.job_state(idle), "running")  # nobody waits: it keeps its GPU
            waiting = d.enqueue(["sh", "-c", until_exists(d.path("waiting-go"))], name="waiting")
            d.wait_state(waiting, "running")
            shown = d.show(idle)
            self.assertEqual(shown["state"], "suspended")
            self.assertRegex(shown["reason"], r"^suspended by gpupoold \(idle for .+, jobs waiting\); resumes when its "
                                              r"GPUs are free$")
            self.assertEqual(self.driver_state(pid), "checkpointed")
            d.touch("waiting-go")
            self.assertEqual(d.finish(waiting)[0]["state"], "done")
            d.wait_state(idle, "running")
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("idle-go")
            self.assertEqual(d.finish(idle)[0]["state"], "done")

    def test_a_job_of_higher_priority_has_one_of_lower_priority_suspended_for_it(self):
        with self.daemon('[scheduler]\npreempt = "suspend"\n') as d:
            low, pid = self.gpu_job(d, "low")
            urgent = d.submit("--priority", "5", "--name", "urgent", "--", "sh", "-c", until_exists(d.path("urgent-go")))
            d.wait_state(urgent, "running")
            shown = d.show(low)
            self.assertEqual(shown["state"], "suspended")
            self.assertEqual(shown["reason"], f"suspended by gpupoold (for job {urgent} of priority 5); resumes when its "
                                              "GPUs are free")
            self.assertEqual(self.driver_state(pid), "checkpointed")
            d.touch("urgent-go")
            self.assertEqual(d.finish(urgent)[0]["state"], "done")
            d.wait_state(low, "running")
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("low-go")
            self.assertEqual(d.finish(low)[0]["state"], "done")

    def test_a_job_on_loan_is_suspended_for_the_reservation_and_resumes_after_it(self):
        self.on_loan(restart=False)

    def test_a_restarted_daemon_knows_a_job_on_loan_is_on_loan(self):
        self.on_loan(restart=True)

    def first_and_whole(self, d):
        """A slice until "first" ends (its limit: an hour away); "whole" waits for all the GPU, with
        the reservation. Returns their ids."""
        first = d.enqueue(["sh", "-c", until_exists(d.path("first-go"))], name="first", mem_mib=20480,
                          time_limit_s=3600)
        d.wait_state(first, "running")
        whole = d.enqueue(["sh", "-c", until_exists(d.path("whole-go"))], name="whole")
        wait_until(lambda: "reserved for it" in d.show(whole).get("reason", ""), what="the reservation")
        return first, whole

    def on_loan(self, restart):
        with self.daemon('[scheduler]\nbackfill = "suspend"\n') as d:
            first, whole = self.first_and_whole(d)
            # Without a time limit it could only start after "whole"; on loan it starts now.
            loan, pid = self.gpu_job(d, "loan", mem_mib=20480)
            self.assertEqual(d.job_state(whole), "queued")
            if restart:
                self.assertEqual(d.stop(), 0)
                d.start()
                self.assertEqual(d.job_state(loan), "running")
                d.wait_for_samples(2)
            d.touch("first-go")
            d.wait_state(whole, "running")
            shown = d.show(loan)
            self.assertEqual(shown["state"], "suspended")
            self.assertEqual(shown["reason"], f"suspended by gpupoold (on loan: GPU 0 reserved for job {whole}); "
                                              "resumes when its GPUs are free")
            self.assertEqual(self.driver_state(pid), "checkpointed")
            d.touch("whole-go")
            self.assertEqual(d.finish(whole)[0]["state"], "done")
            d.wait_state(loan, "running")
            self.assertEqual(self.driver_state(pid), "running")
            d.touch("loan-go")
            self.assertEqual(d.finish(loan)[0]["state"], "done")

    def test_a_job_on_loan_that_cannot_be_suspended_runs_on_and_the_reservation_waits(self):
        with self.daemon('[scheduler]\nbackfill = "suspend"\n') as d:
            first, whole = self.first_and_whole(d)
            # No process of it on the GPU: nothing to checkpoint, so it cannot be suspended.
            loan = d.enqueue(["sh", "-c", until_exists(d.path("loan-go"))], name="loan", mem_mib=20480)
            d.wait_state(loan, "running")
            d.touch("first-go")
            self.assertEqual(d.finish(first)[0]["state"], "done")
            refusal = "is on loan but cannot be suspended"
            wait_until(lambda: refusal in d.log_text(), what="the refused suspension")
            d.wait_for_samples(2)
            self.assertEqual((d.job_state(loan), d.job_state(whole)), ("running", "queued"))
            self.assertEqual(d.log_text().count(refusal), 1)  # tried once: it is on loan no more
            d.touch("loan-go")
            self.assertEqual(d.finish(loan)[0]["state"], "done")
            d.wait_state(whole, "running")
            d.touch("whole-go")
            self.assertEqual(d.finish(whole)[0]["state"], "done")

    def test_an_interactive_job_under_gpupool_run_is_suspended_through_its_client(self):
        with self.daemon() as d:
            run = d.background("run", "--", "sh", "-c", f"echo $$ > {d.path('run.pid')}; {until_exists(d.path('run-go'))}",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            pid = int(wait_until(lambda: _read(d.path("run.pid")), what="the program's pid"))
            [job] = [j["id"] for j in d.jobs() if j["kind"] == "interactive"]
            write_overlay(self.overlay, {0: {"processes": [{"pid": pid, "used_memory_mib": GPU_MIB, "kind": "compute"}]}})
            d.wait_for_samples(2)
            d.gp("suspend", str(job), check=True)
            self.assertEqual((d.job_state(job), self.driver_state(pid), d.held_gpus()), ("suspended", "checkpointed", []))
            other = d.enqueue(["true"], name="other")  # the GPU is free for another meanwhile
            self.assertEqual(d.finish(other)[0]["state"], "done")
            d.gp("resume", str(job), check=True)
            self.assertEqual((self.driver_state(pid), len(d.held_gpus())), ("running", 1))
            d.touch("run-go")
            out, err = run.communicate(timeout=60)
            self.assertEqual(run.returncode, 0, err)
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def test_a_suspended_jobs_time_does_not_count_against_its_limit(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job", time_limit_s=4)
            started = d.show(job)["start_time"]
            d.gp("suspend", str(job), check=True)
            # Past its limit while suspended: its supervisor's clock stands still.
            wait_until(lambda: time.time() > started + 5, what="the time limit passed")
            d.wait_for_samples(1)
            self.assertEqual((d.job_state(job), self.driver_state(pid)), ("suspended", "checkpointed"))
            d.gp("resume", str(job), check=True)
            suspended_for = d.show(job)["suspended_s"]
            self.assertGreater(suspended_for, 3)
            # A restarted daemon reads it from the supervisor's record.
            self.assertEqual(d.stop(), 0)
            d.start()
            self.assertAlmostEqual(d.show(job)["suspended_s"], suspended_for, delta=2)
            d.touch("job-go")
            ended = d.finish(job)[0]
            self.assertEqual((ended["state"], ended["exit_code"]), ("done", 0))

    def test_gpupool_runs_time_limit_does_not_count_the_time_suspended(self):
        with self.daemon() as d:
            run = d.background("run", "--time", "4s", "--", "sh", "-c",
                               f"echo $$ > {d.path('run.pid')}; {until_exists(d.path('run-go'))}",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            pid = int(wait_until(lambda: _read(d.path("run.pid")), what="the program's pid"))
            started = time.time()
            [job] = [j["id"] for j in d.jobs() if j["kind"] == "interactive"]
            write_overlay(self.overlay, {0: {"processes": [{"pid": pid, "used_memory_mib": GPU_MIB, "kind": "compute"}]}})
            d.wait_for_samples(2)
            d.gp("suspend", str(job), check=True)
            # Past its limit while suspended: its client's clock stands still.
            wait_until(lambda: time.time() > started + 5, what="the time limit passed")
            self.assertIsNone(run.poll())
            d.gp("resume", str(job), check=True)
            suspended_for = d.show(job)["suspended_s"]
            self.assertGreater(suspended_for, 3)
            # A restarted daemon keeps it (it is stored): its own backstop of the limit counts on it.
            d.kill()
            d.start()
            self.assertEqual(d.show(job)["suspended_s"], suspended_for)
            d.touch("run-go")
            out, err = run.communicate(timeout=60)
            self.assertEqual(run.returncode, 0, err)
            self.assertEqual(d.finish(job)[0]["state"], "done")

    def test_a_cancelled_suspended_job_ends_cancelled(self):
        with self.daemon() as d:
            job, pid = self.gpu_job(d, "job")
            d.gp("suspend", str(job), check=True)
            d.gp("cancel", str(job), check=True)
            [ended] = d.finish(job)
            self.assertEqual(ended["state"], "cancelled")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    main()
