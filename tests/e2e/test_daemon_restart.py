"""gpupoold killed with -9 and restarted: jobs run exactly once, running ones are adopted (their
supervisors outlive the daemon), outcomes reached while it was down are recorded, no lease leaks
and no GPU is given twice (docs/daemon.md, "Supervisors")."""
import os
import random
import subprocess
import time
import unittest

from harness import (GPUPOOLD, Daemon, has_socket, job_record_script, main, overlaps, read_records, request_as,
                     until_exists, wait_until)


def sh(script):
    return ["sh", "-c", script]


def ended(records, job):
    """The end time a job recorded with job_record_script(), or None."""
    return read_records(records).get(str(job), (None, None, []))[1]


class RestartTest(unittest.TestCase):
    def test_outcomes_reached_while_the_daemon_is_down_are_recorded(self):
        with Daemon() as d:
            records = d.path("records")
            def wait_then_exit(go, code):
                return sh(job_record_script(records, f"{until_exists(d.path(go))}; exit {code}"))
            ends_while_down = d.enqueue(wait_then_exit("go1", 7))
            ends_after_restart = d.enqueue(wait_then_exit("go2", 5))
            out_of_time = d.enqueue(sh(job_record_script(records, "sleep 60")), time_limit_s=6.0)
            blocker = d.enqueue(sh(job_record_script(records, "sleep 60")), gpus=5)
            queued = d.enqueue(sh(job_record_script(records, "true")), gpus=8)
            before = {job: d.wait_state(job, "running")
                      for job in (ends_while_down, ends_after_restart, out_of_time, blocker)}
            self.assertEqual(d.job_state(queued), "queued")
            # A wait carries on across a restart (test_wait.py); one whose daemon does not come back
            # within GPUPOOL_RECONNECT_S fails with one line, as one finding no daemon does.
            waiter = d.background("wait", str(blocker), env={"GPUPOOL_RECONNECT_S": "0.5"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            # Either way it must fail with one line: connected when the daemon dies, or finding no daemon.
            wait_until(lambda: has_socket(waiter.pid) or waiter.poll() is not None,
                       what="gpupool wait connecting")
            time.sleep(0.2)

            d.kill()
            self.assertEqual(len(d.held_gpus()), 8, "the jobs keep their GPUs while the daemon is down")
            self.assertTrue(os.path.exists(d.socket), "a killed daemon leaves its socket")
            _, err = waiter.communicate(timeout=60)
            self.assertNotEqual(waiter.returncode, 0, "wait returned success when the daemon died")
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            down = d.gp("jobs")
            self.assertNotEqual(down.returncode, 0)
            self.assertEqual(len(down.stderr.strip().splitlines()), 1, down.stderr)
            self.assertIn("no gpupoold is running", down.stderr)
            d.touch("go1")
            wait_until(lambda: ended(records, ends_while_down),
                       what="the first job ending while the daemon is down")
            wait_until(lambda: ended(records, out_of_time), 20,
                       what="the supervisor enforcing the time limit while the daemon is down")
            wait_until(lambda: len(d.held_gpus()) == 6, what="their leases being released")

            d.start()  # over the stale socket
            shown = d.show(ends_while_down)
            self.assertEqual((shown["state"], shown["exit_code"]), ("failed", 7))
            shown = d.show(out_of_time)
            self.assertEqual(shown["state"], "failed")
            self.assertIn("time limit", shown["reason"])
            for job in (ends_after_restart, blocker):
                shown = d.show(job)
                self.assertEqual(shown["state"], "running", "adopted")
                self.assertEqual(shown["gpus"], before[job]["gpus"])
                self.assertEqual(shown["start_time"], before[job]["start_time"])
            d.wait_for_samples()
            self.assertEqual(d.job_state(queued), "queued", "8 GPUs are not free yet")
            d.touch("go2")
            cancelled = d.gp("cancel", str(blocker))
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            self.assertEqual(d.wait(ends_after_restart).returncode, 5)
            after_restart, stopped, last = d.finish(ends_after_restart, blocker, queued)
            self.assertEqual((after_restart["state"], after_restart["exit_code"]), ("failed", 5))
            self.assertEqual(stopped["state"], "cancelled", "an adopted job can be cancelled")
            self.assertEqual(last["state"], "done")
            self.assertGreaterEqual(last["start_time"], stopped["end_time"])
            self.assertGreaterEqual(last["start_time"], after_restart["end_time"])
            runs = read_records(records)
            self.assertEqual(len(runs), 5)
            self.assertEqual(overlaps(runs)[0], [])
            self.assertEqual([job["attempts"] for job in d.all_jobs()], [1] * 5)
            self.assertEqual(d.leases(), [])

    def test_an_interactive_job_survives_a_restart(self):
        with Daemon() as d:
            run = d.background("run", "-q", "-g", "8", "--", "sh", "-c",
                               f"{until_exists(d.path('go'))}; echo finished",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                job = wait_until(lambda: d.jobs(state="running"), what="the run's job running")[0]["id"]
                d.kill()
                d.start()
                shown = d.show(job)
                self.assertEqual((shown["kind"], shown["state"]), ("interactive", "running"))
                after = d.enqueue(["true"])
                d.wait_for_samples()
                self.assertEqual(d.job_state(after), "queued", "the run still holds all 8 GPUs")
                d.touch("go")
                out, _ = run.communicate(timeout=60)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.communicate()
            self.assertEqual((out, run.returncode), ("finished\n", 0))
            self.assertEqual(d.wait_state(job, "done", "failed")["state"], "done")
            self.assertEqual(d.finish(after)[0]["state"], "done")
            self.assertGreaterEqual(d.show(after)["start_time"], d.show(job)["end_time"])
            self.assertEqual(d.held_gpus(), [])

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
                jobs[d.enqueue(sh(job_record_script(records, body)), gpus=rng.choice([1, 1, 1, 2, 4]))] = code

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
            self.assertIn(d.wait(*jobs, timeout=240).returncode, (0, 7), f"seed {seed}")
            with open(marker) as f:
                ran = [int(line) for line in f]
            shown = {job["id"]: job for job in d.all_jobs()}
            wrong = [job for job in jobs if ran.count(job) != 1]
            if wrong:
                self.fail(f"jobs that did not run exactly once (seed {seed}): " + "; ".join(
                    f"job {job} ran {ran.count(job)} times, {shown[job]['state']} ({shown[job]['reason']}), "
                    f"{shown[job]['attempts']} attempts" for job in wrong))
            for job, code in jobs.items():
                expected = ("done", 0) if code == 0 else ("failed", code)
                self.assertEqual((shown[job]["state"], shown[job]["exit_code"]), expected,
                                 f"job {job}, seed {seed}")
                self.assertEqual(shown[job]["attempts"], 1)
            runs = read_records(records)
            self.assertEqual(sorted(int(j) for j in runs), sorted(jobs))
            clashes, _ = overlaps(runs)
            self.assertEqual(clashes, [], f"two jobs held one GPU at once (seed {seed})")
            self.assertEqual(d.leases(), [])

    def test_kills_while_a_job_is_handed_to_its_supervisor_lose_no_job(self):
        # Each kill lands as the daemon starts a job: once the attempt's record exists, while it
        # sends the attempt (its environment made large, so that takes a while) to the supervisor.
        with Daemon() as d:
            marker = d.path("ran")
            environment = [f"{k}={v}" for k, v in d.env.items()]
            environment += [f"E2E_BALLAST{i}={'x' * 100_000}" for i in range(8)]
            jobs = []
            for _ in range(5):
                job = d.enqueue(sh(f"echo $GPUPOOL_JOB >> {marker}"), environment=environment)
                record = os.path.join(d.state_dir, "attempts", f"{job}.1")
                deadline = time.monotonic() + 30
                while not os.path.exists(record) and time.monotonic() < deadline:
                    pass
                d.kill()
                d.start()
                jobs.append(job)
            d.finish(*jobs)
            with open(marker) as f:
                ran = [int(line) for line in f]
            for shown in d.all_jobs():
                with self.subTest(job=shown["id"]):
                    self.assertEqual((shown["state"], ran.count(shown["id"])), ("done", 1), shown["reason"])

    def test_a_submission_sent_again_is_stored_once(self):
        with Daemon() as d:
            submit = {"op": "submit", "token": "7f3e-retry", "job": d.job_spec(["true"], 1, name="once")}
            first = d.request(submit)["id"]
            self.assertEqual(d.request(submit)["id"], first)
            # An array sent again gets its tasks back, not new ones.
            array = {"op": "submit", "token": "7f3e-array", "array": [0, 1, 2], "job": d.job_spec(["true"], 1)}
            tasks = d.request(array)
            self.assertEqual(d.request(array), tasks)
            # Sent again to a daemon started since (the answer was lost in its crash): still once.
            d.finish(first)
            d.stop()
            d.start()
            self.assertEqual(d.request(submit)["id"], first)
            self.assertEqual(sorted(j["id"] for j in d.all_jobs()),
                             sorted([first] + list(range(tasks["id"], tasks["id"] + 3))))
            # gpupool submit sends a token of its own each time: two submissions are two jobs.
            ids = {d.gp("submit", "--", "true", check=True).stdout.strip() for _ in range(2)}
            self.assertEqual(len(ids), 2)

    def test_one_daemon_per_state_directory(self):
        with Daemon() as d:
            job = d.enqueue(["sleep", "60"])
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
            self.assertEqual(d.status()["pid"], d.proc.pid)

    def test_a_stale_socket_does_not_stop_a_new_daemon(self):
        with Daemon() as d:
            d.kill()
            self.assertTrue(os.path.exists(d.socket))
            self.assertFalse(d.answers())
            d.start()
            self.assertEqual(d.wait(d.submit("--", "true")).returncode, 0)
            # And again, with a job running across the restart.
            job = d.enqueue(sh(until_exists(d.path("go"))))
            d.wait_state(job, "running")
            d.kill()
            d.start()
            self.assertEqual(d.job_state(job), "running")
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")


    @unittest.skipUnless(os.geteuid() == 0, "needs root to submit as a second user")
    def test_fair_share_outlives_a_restart(self):
        other = 54321  # a user who has not used the GPUs
        with Daemon(mode=0o755) as d:
            self.assertEqual(d.finish(d.enqueue(["sleep", "2"], gpus=8))[0]["state"], "done")
            self.assertEqual(d.stop(), 0)
            d.start()
            # Both ask for the whole machine, held, this user first; released together, the one who
            # has used less goes first, arrival notwithstanding.
            job = {"command": ["true"], "cwd": "/", "gpu_count": 8, "environment": ["PATH=/usr/bin:/bin"]}
            mine = d.request({"op": "submit", "hold": True, "job": job})["id"]
            theirs = request_as(d, other, {"op": "submit", "hold": True, "job": job})["id"]
            self.assertEqual(d.show(theirs)["uid"], other)
            d.request({"op": "release", "ids": [mine, theirs]})
            self.assertEqual([j["state"] for j in d.finish(mine, theirs)], ["done", "done"])
            self.assertLess(d.show(theirs)["start_time"], d.show(mine)["start_time"])
    def test_run_time_estimates_outlive_a_restart(self):
        other = 54321  # a user without a record
        with Daemon(mode=0o755) as d:
            # Five ended jobs: enough for an estimate of this user's run times (a fraction of a second).
            ran = d.finish(*[d.enqueue(["true"]) for _ in range(5)])
            self.assertEqual([j["state"] for j in ran], ["done"] * 5)
            self.assertEqual(d.stop(), 0)
            d.start()
            # Seven GPUs held for up to 10 minutes, the whole machine reserved for the job after.
            blocker = d.enqueue(["sleep", "600"], gpus=7, time_limit_s=600)
            d.wait_state(blocker, "running")
            whole = d.enqueue(["true"], gpus=8, time_limit_s=60)
            # Neither says how long it runs: only the one whose user has a record may take the
            # eighth GPU meanwhile.
            theirs = d.enqueue(["sleep", "600"], uid=other)
            d.wait_for_samples()
            self.assertEqual(d.show(whole)["state"], "queued")
            shown = d.show(theirs)
            self.assertEqual(shown["state"], "queued")
            self.assertIn("with a time limit (--time) under", shown["reason"])
            mine = d.enqueue(["sleep", "600"])
            d.wait_state(mine, "running")
            self.assertEqual((d.show(theirs)["state"], d.show(whole)["state"]), ("queued", "queued"))


if __name__ == "__main__":
    main()
