"""gpupoold killed with -9 and restarted: jobs run exactly once, running ones are adopted (their
supervisors outlive the daemon), outcomes reached while it was down are recorded, no lease leaks
and no GPU is given twice (docs/daemon.md, "Supervisors")."""
import os
import random
import subprocess
import time
import unittest

from harness import (GPUPOOLD, Daemon, job_record_script, main, overlaps, read_records, until_exists,
                     wait_until)


def sh(script):
    return ["--", "sh", "-c", script]


class RestartTest(unittest.TestCase):
    def test_outcomes_reached_while_the_daemon_is_down_are_recorded(self):
        with Daemon() as d:
            records = d.path("records")
            ends_while_down = d.submit(*sh(job_record_script(
                records, f"{until_exists(d.path('go1'))}; exit 7")))
            ends_after_restart = d.submit(*sh(job_record_script(
                records, f"{until_exists(d.path('go2'))}; exit 5")))
            out_of_time = d.submit("--time", "6s", *sh(job_record_script(records, "sleep 60")))
            blocker = d.submit("-g", "5", *sh(job_record_script(records, "sleep 60")))
            queued = d.submit("-g", "8", *sh(job_record_script(records, "true")))
            for job in (ends_while_down, ends_after_restart, out_of_time, blocker):
                d.wait_state(job, "running")
            before = {job: d.show(job) for job in (ends_while_down, ends_after_restart, out_of_time, blocker)}
            self.assertEqual(d.job_state(queued), "queued")
            waiter = d.background("wait", str(blocker), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

            d.kill()
            self.assertTrue(os.path.exists(d.socket), "a killed daemon leaves its socket")
            _, err = waiter.communicate(timeout=30)
            self.assertNotEqual(waiter.returncode, 0, "wait returned success when the daemon died")
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            down = d.gp("jobs")
            self.assertNotEqual(down.returncode, 0)
            self.assertEqual(len(down.stderr.strip().splitlines()), 1, down.stderr)
            self.assertIn("no gpupoold is running", down.stderr)
            self.assertEqual(len(d.leases()), 8, "the jobs keep their GPUs while the daemon is down")
            d.touch("go1")
            wait_until(lambda: read_records(records).get(str(ends_while_down), (0, None))[1],
                       what="the first job ending while the daemon is down")
            wait_until(lambda: read_records(records).get(str(out_of_time), (0, None))[1], 15,
                       what="the supervisor enforcing the time limit while the daemon is down")
            wait_until(lambda: len(d.leases()) == 6, what="their leases being released")

            d.start()  # over the stale socket
            shown = d.wait_state(ends_while_down, "failed", "done")
            self.assertEqual((shown["state"], shown["exit_code"]), ("failed", 7))
            shown = d.wait_state(out_of_time, "failed", "done")
            self.assertEqual(shown["state"], "failed")
            self.assertIn("time limit", shown["reason"])
            for job in (ends_after_restart, blocker):
                shown = d.show(job)
                self.assertEqual(shown["state"], "running", "adopted")
                self.assertEqual(shown["gpus"], before[job]["gpus"])
                self.assertEqual(shown["start_time"], before[job]["start_time"])
            time.sleep(0.6)  # three sampling intervals
            self.assertEqual(d.job_state(queued), "queued", "8 GPUs are not free yet")
            d.touch("go2")
            cancelled = d.gp("cancel", str(blocker))
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            self.assertEqual(d.wait(ends_after_restart).returncode, 5)
            self.assertEqual(d.wait(queued).returncode, 0)
            shown = d.show(ends_after_restart)
            self.assertEqual((shown["state"], shown["exit_code"]), ("failed", 5))
            self.assertEqual(d.show(blocker)["state"], "cancelled", "an adopted job can be cancelled")
            shown = d.show(queued)
            self.assertEqual(shown["state"], "done")
            self.assertGreaterEqual(shown["start_time"], d.show(blocker)["end_time"])
            self.assertGreaterEqual(shown["start_time"], d.show(ends_after_restart)["end_time"])
            runs = read_records(records)
            self.assertEqual(len(runs), 5)
            self.assertEqual(overlaps(runs)[0], [])
            for job in (ends_while_down, ends_after_restart, out_of_time, blocker, queued):
                self.assertEqual(d.show(job)["attempts"], 1)
            self.assertEqual(d.leases(), [])

    def test_an_interactive_job_survives_a_restart(self):
        with Daemon() as d:
            run = d.background("run", "-q", "-g", "8", "--", "sh", "-c",
                               f"{until_exists(d.path('go'))}; echo finished",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                job = wait_until(lambda: d.jobs("--state", "running"), what="the run's job running")[0]["id"]
                d.kill()
                d.start()
                shown = d.show(job)
                self.assertEqual((shown["kind"], shown["state"]), ("interactive", "running"))
                after = d.submit("--", "true")
                time.sleep(0.6)
                self.assertEqual(d.job_state(after), "queued", "the run still holds all 8 GPUs")
                d.touch("go")
                out, _ = run.communicate(timeout=30)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.communicate()
            self.assertEqual(out, "finished\n")
            self.assertEqual(run.returncode, 0)
            self.assertEqual(d.wait_state(job, "done", "failed")["state"], "done")
            self.assertEqual(d.wait(after).returncode, 0)
            self.assertGreaterEqual(d.show(after)["start_time"], d.show(job)["end_time"])
            self.assertEqual(d.leases(), [])

    def test_repeated_kills_lose_no_job_and_run_none_twice(self):
        seed = int(os.environ.get("E2E_SEED", time.time()))
        rng = random.Random(seed)
        with Daemon() as d:
            records = d.path("records")
            marker = d.path("ran")
            jobs = {}  # id -> the exit code it ends with

            def submit():
                code = 7 if len(jobs) % 6 == 5 else 0
                body = f"echo $GPUPOOL_JOB >> {marker}; sleep {rng.uniform(0.2, 1.5):.2f}; exit {code}"
                count = rng.choice([1, 1, 1, 2, 4])
                jobs[d.submit("-g", str(count), *sh(job_record_script(records, body)))] = code

            for _ in range(16):
                submit()
            for _ in range(5):
                # Kills at random moments, some right after a submission (while it starts jobs).
                for _ in range(2):
                    submit()
                time.sleep(rng.uniform(0, 1.0))
                d.kill()
                time.sleep(rng.uniform(0, 0.8))  # jobs end, or not, while it is down
                d.start()
            self.assertIn(d.wait(*jobs, timeout=180).returncode, (0, 7), f"seed {seed}")
            with open(marker) as f:
                ran = [int(line) for line in f]
            wrong = {job: d.show(job) for job in jobs if ran.count(job) != 1}
            if wrong:
                self.fail(f"jobs that did not run exactly once (seed {seed}): " + "; ".join(
                    f"job {job} ran {ran.count(job)} times, {shown['state']} ({shown['reason']}), "
                    f"{shown['attempts']} attempts" for job, shown in wrong.items()))
            for job, code in jobs.items():
                shown = d.show(job)
                expected = ("done", 0) if code == 0 else ("failed", code)
                self.assertEqual((shown["state"], shown["exit_code"]), expected, f"job {job}, seed {seed}")
                self.assertEqual(shown["attempts"], 1)
            runs = read_records(records)
            self.assertEqual(sorted(int(j) for j in runs), sorted(jobs))
            clashes, _ = overlaps(runs)
            self.assertEqual(clashes, [], f"two jobs held one GPU at once (seed {seed})")
            self.assertEqual(d.leases(), [])

    def test_kills_right_after_submissions_lose_no_job(self):
        # The daemon starts a job as soon as it is submitted: these kills land while it hands the
        # attempt to its supervisor.
        with Daemon() as d:
            marker = d.path("ran")
            jobs = []
            for _ in range(5):
                jobs.append(d.submit(*sh(f"echo $GPUPOOL_JOB >> {marker}")))
                d.kill()
                d.start()
            d.wait(*jobs)
            with open(marker) as f:
                ran = [int(line) for line in f]
            for job in jobs:
                shown = d.show(job)
                with self.subTest(job=job):
                    self.assertEqual((shown["state"], ran.count(job)), ("done", 1), shown["reason"])

    def test_one_daemon_per_state_directory(self):
        with Daemon() as d:
            job = d.submit("--", "sleep", "60")
            d.wait_state(job, "running")
            second = subprocess.run([GPUPOOLD], env=d.env, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(second.returncode, 0)
            self.assertEqual(len(second.stderr.strip().splitlines()), 1, second.stderr)
            self.assertIn("another gpupoold", second.stderr)
            # Another state directory but the same socket: refused too, and the socket stays.
            other = dict(d.env, GPUPOOL_STATE_DIR=d.path("other-state"))
            third = subprocess.run([GPUPOOLD], env=other, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(third.returncode, 0)
            self.assertEqual(len(third.stderr.strip().splitlines()), 1, third.stderr)
            self.assertEqual(d.job_state(job), "running", "the first daemon still serves")
            self.assertTrue(d.answers())

    def test_a_stale_socket_does_not_stop_a_new_daemon(self):
        with Daemon() as d:
            d.kill()
            self.assertTrue(os.path.exists(d.socket))
            self.assertFalse(d.answers())
            d.start()
            self.assertEqual(d.wait(d.submit("--", "true")).returncode, 0)
            # And again, with a job running across the restart.
            job = d.submit(*sh(until_exists(d.path("go"))))
            d.wait_state(job, "running")
            d.kill()
            d.start()
            self.assertEqual(d.job_state(job), "running")
            d.touch("go")
            self.assertEqual(d.wait(job).returncode, 0)


if __name__ == "__main__":
    main()
