"""`gpupool wait` as scripts use it: the exit status counts every job asked about (also those that
ended before the wait began), one summary line however many jobs, --timeout, --json; and a wait
or a `logs -f` that carries on across a restart of gpupoold (docs/daemon.md, "Waiting for jobs")."""
import json
import os
import pwd
import subprocess
import unittest

from harness import Daemon, LineReader, has_socket, main, until_exists, wait_until


def sh(script):
    return ["--", "sh", "-c", script]


class WaitTest(unittest.TestCase):
    def test_wait_all_counts_the_jobs_that_ended_before_it_began(self):
        with Daemon() as d:
            failing = [d.submit(*sh(f"exit {code}")) for code in (1, 2, 3)]
            d.finish(*failing)  # ended before `wait` connects
            last = d.submit("--", "sleep", "0.5")
            waited = d.gp("wait", "--all")
            self.assertEqual(waited.returncode, 3, waited.stderr)
            ids = ", ".join(map(str, failing))
            self.assertEqual(waited.stderr, f"gpupool: 4 jobs: 1 done, 3 failed (ids {ids})\n")
            self.assertEqual(d.job_state(last), "done")
            # --since moves the start: only what was submitted since then counts.
            since_now = d.gp("wait", "--all", "--since", "0s")
            self.assertEqual((since_now.returncode, since_now.stderr), (0, "gpupool: no jobs of yours to wait for\n"))
            refused = d.gp("wait", "--since", "1h", str(last))
            self.assertEqual((refused.returncode, refused.stderr), (1, "gpupool: --since goes with --all\n"))

    def test_many_jobs_make_one_summary_line(self):
        with Daemon() as d:
            jobs = [d.enqueue(["true"]) for _ in range(30)]
            failed = d.enqueue(["sh", "-c", "exit 4"])
            cancelled = d.submit("--hold", "--", "sleep", "60")  # never runs: ends with no exit code
            self.assertEqual(d.gp("cancel", str(cancelled)).returncode, 0)
            waited = d.wait(*jobs, failed, cancelled)
            self.assertEqual(waited.returncode, 4)
            self.assertEqual(waited.stderr,
                             f"gpupool: 32 jobs: 30 done, 1 failed (ids {failed}), 1 cancelled (ids {cancelled})\n")
            verbose = d.wait("-v", *jobs, failed, cancelled)
            lines = verbose.stderr.splitlines()
            self.assertEqual(len(lines), 33, verbose.stderr)
            self.assertEqual(lines[-2], f"gpupool: job {cancelled} cancelled: cancelled by {pwd.getpwuid(os.geteuid()).pw_name}")
            self.assertEqual(d.wait("-q", *jobs, failed).stderr, "")

    def test_a_timeout_gives_up_with_124_and_names_the_jobs_still_running(self):
        with Daemon() as d:
            done = d.submit("--", "true")
            long = d.submit("--", "sleep", "60")
            d.finish(done)
            d.wait_state(long, "running")
            waited = d.wait("--timeout", "1s", done, long)
            self.assertEqual(waited.returncode, 124, waited.stderr)
            self.assertEqual(waited.stderr, f"gpupool: 2 jobs: 1 done, 1 not ended (ids {long})\n")
            as_json = d.wait("--json", "-t", "0.5s", done, long)
            self.assertEqual(as_json.returncode, 124)
            shown = json.loads(as_json.stdout)
            self.assertEqual([(job["id"], job["state"]) for job in shown], [(done, "done"), (long, "running")])
            bad = d.wait("--timeout", "soon", done)
            self.assertEqual(bad.returncode, 2, bad.stderr)
            self.assertEqual(len(bad.stderr.splitlines()), 1, bad.stderr)
            d.gp("cancel", str(long), check=True)

    def test_a_wait_carries_on_across_a_restart_of_the_daemon(self):
        with Daemon() as d:
            job = d.submit(*sh(f"{until_exists(d.path('go'))}; exit 6"))
            d.wait_state(job, "running")
            waiter = d.background("wait", str(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_until(lambda: has_socket(waiter.pid), what="gpupool wait connecting")
            d.stop()  # SIGTERM: the job runs on, the waiter waits for the next daemon
            self.assertIsNone(waiter.poll(), "wait ended when the daemon stopped")
            d.start()
            d.touch("go")
            _, errors = waiter.communicate(timeout=60)
            self.assertEqual(waiter.returncode, 6, errors)
            self.assertEqual(errors, f"gpupool: job {job} failed(6): exit code 6\n")

    def test_logs_follow_carries_on_across_a_restart_of_the_daemon(self):
        with Daemon() as d:
            job = d.submit(*sh(f"echo before; {until_exists(d.path('go'))}; echo after"))
            follower = d.background("logs", "-f", str(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            lines = LineReader(follower.stdout)
            self.assertEqual(lines.readline(), "before\n")
            d.stop()
            self.assertIsNone(follower.poll(), "logs -f ended when the daemon stopped")
            d.start()
            d.touch("go")
            self.assertEqual(lines.readline(), "after\n")
            self.assertEqual(lines.readline(), "")  # the job has ended: so has logs -f
            self.assertEqual(follower.wait(timeout=30), 0, follower.stderr.read())

    def test_a_wait_whose_daemon_does_not_come_back_fails_with_one_line(self):
        with Daemon() as d:
            job = d.submit("--", "sleep", "60")
            waiter = d.background("wait", str(job), env={"GPUPOOL_RECONNECT_S": "1"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_until(lambda: has_socket(waiter.pid), what="gpupool wait connecting")
            d.kill()
            _, errors = waiter.communicate(timeout=60)
            self.assertEqual(waiter.returncode, 1, errors)
            self.assertRegex(errors, r"^gpupool: lost gpupoold, and none answered on \S+ within 1 s\n$")
            d.start()
            d.gp("cancel", str(job), check=True)


if __name__ == "__main__":
    main()
