"""Interactive work with a time limit, and queued jobs that say why they wait (docs/launch.md,
docs/scheduling.md "Why a job waits, and expected starts"): `run`, `launch` and acquire() declare
--time, start beside GPUs reserved for a wider job when they end before it, and are ended at the
limit; `gpupool jobs` shows one line per job with the reason in one word and an expected start."""
import os
import subprocess
import sys
import time
import unittest

from harness import SOURCE_DIR, Daemon, main, until_exists, wait_until

PYTHON_DIR = os.path.abspath(os.path.join(SOURCE_DIR, "python"))
sys.path.insert(0, PYTHON_DIR)
import gpupool  # noqa: E402


def reserved_machine(d):
    """Seven of the eight GPUs busy for up to an hour, and a job for all eight first in line:
    the free GPU is reserved for it. Returns (the seven's id, the eight's id)."""
    seven = d.submit("-g", "7", "--time", "1h", "--", "sh", "-c", until_exists(d.path("go")))
    d.wait_state(seven, "running")
    eight = d.submit("-g", "8", "--name", "wide", "--", "true")
    wait_until(lambda: d.show(eight).get("wait_reason") == "Resources", what="the wide job's reservation")
    return seven, eight


class TimeLimitTest(unittest.TestCase):
    def test_only_work_that_ends_before_the_reservation_takes_the_free_gpu(self):
        with Daemon() as d:
            seven, eight = reserved_machine(d)
            wide = d.show(eight)
            self.assertIn("next in line: GPU 0-7 reserved for it, expected to start in", wide["reason"])
            self.assertAlmostEqual(wide["expected_start"], d.show(seven)["start_time"] + 3600, delta=5)
            # Without a time limit `run` waits, told which job holds the GPU and when it starts.
            waited = d.gp("run", "--wait=1s", "--", "true")
            self.assertEqual(waited.returncode, 1, waited.stderr)
            self.assertRegex(waited.stderr, rf"queued: GPU 0-7 reserved for job {eight} of \S+, expected to start in "
                                            r"(59|60)m; with a time limit \(--time\) under (59|60)m it could start now")
            # With one that ends in time it starts at once; so does acquire().
            ran = d.gp("run", "--wait=10s", "--time", "5m", "--", "sh", "-c", "echo ran")
            self.assertEqual((ran.returncode, ran.stdout), (0, "ran\n"), ran.stderr)
            lease = gpupool.acquire(1, timeout=10, time="5m", socket_path=d.socket)
            self.assertEqual(d.show(lease.id)["time_limit_s"], 300)
            lease.release()
            # A limit past the reservation's start is no help, and says so.
            heard = []
            with self.assertRaisesRegex(gpupool.Error, "gave up waiting"):
                gpupool.acquire(1, timeout=1, time="2h", on_wait=heard.append, socket_path=d.socket)
            self.assertRegex(heard[0], r"its time limit \(2h00m\) ends after that$")
            d.touch("go")
            d.finish(seven, eight)

    def test_jobs_shows_one_line_per_job_with_a_short_reason_and_an_expected_start(self):
        with Daemon() as d:
            seven, eight = reserved_machine(d)
            held = d.submit("--hold", "--", "true")
            after = d.submit("--after", str(eight), "--", "true")
            kept = d.submit("--", "sleep", "1")  # fits the free GPU, which is reserved
            listing = d.gp("jobs", check=True).stdout.splitlines()
            self.assertEqual(listing[0].split(), ["ID", "STATE", "USER", "NAME", "REQ", "GPUS", "START", "TIME",
                                                  "LEFT", "UTIL", "GPU-H", "REASON"])
            rows = {int(line.split()[0]): line for line in listing[1:]}
            self.assertEqual(set(rows), {seven, eight, held, after, kept})
            self.assertTrue(all(len(line) <= 100 for line in listing), listing)
            self.assertTrue(rows[eight].endswith(" Resources"), rows[eight])
            self.assertRegex(rows[eight], r" ~(\d\d:\d\d|\d\d-\d\d) ")  # in about an hour: past midnight, a date
            self.assertTrue(rows[held].endswith(" Held"), rows[held])
            self.assertTrue(rows[after].endswith(" Dependency"), rows[after])
            self.assertTrue(rows[kept].endswith(" Reservation"), rows[kept])
            # The running job: its time left, and its GPUs' use once sampled.
            self.assertRegex(rows[seven], r" 0:5\d:\d\d ")
            d.wait_for_samples(3)
            usage = d.show(seven)["usage"]
            self.assertGreater(usage["gpu_hours"], 0)
            self.assertRegex(d.gp("jobs", check=True).stdout, rf"(?m)^ +{seven} running .* \d+% +\d+\.\d ")
            # show has the detail.
            shown = d.gp("show", str(kept), check=True).stdout
            self.assertRegex(shown, r"(?m)^waiting +Reservation$")
            self.assertRegex(shown, rf"(?m)^state +queued \(GPU 0-7 reserved for job {eight} of ")
            self.assertRegex(shown, r"(?m)^expected +to start at ")
            d.touch("go")
            d.gp("cancel", str(held), check=True)
            d.finish(seven, eight, after, kept)

    def test_run_and_launch_end_their_program_at_the_time_limit(self):
        with Daemon() as d:
            started = time.monotonic()
            ran = d.gp("run", "--time", "1s", "--", "sleep", "30")
            self.assertEqual(ran.returncode, 124, ran.stderr)
            self.assertLess(time.monotonic() - started, 20)
            self.assertRegex(ran.stderr, r"reached its time limit \(1s\) and was stopped\n$")
            job = [j for j in d.all_jobs() if j["kind"] == "interactive"][-1]
            self.assertEqual((job["state"], job["reason"]), ("failed", "time limit"))
            launched = d.gp("launch", "-g", "2", "--time", "1s", "--", "sleep", "30")
            self.assertEqual(launched.returncode, 124, launched.stderr)
            self.assertIn("reached its time limit (1s); stopped all 2 running ranks", launched.stderr)
            self.assertEqual(d.held_gpus(), [])
        # Without a daemon too: the limit is the client's.
        with Daemon() as d:
            d.shutdown()
            ran = d.gp("run", "--time", "0.5s", "--", "sleep", "30")
            self.assertEqual(ran.returncode, 124, ran.stderr)
            self.assertEqual(d.gp("run", "--time", "0", "--", "true").stderr,
                             "gpupool: invalid time limit '0': must be more than 0\n")

    def test_the_daemon_ends_an_acquire_past_its_limit_and_grace(self):
        with Daemon() as d:
            # A client that does not end itself: the daemon sends it SIGTERM, as a cancel does.
            script = ("import gpupool, time, sys; lease = gpupool.acquire(1, time=1, socket_path=sys.argv[1]); "
                      "print(lease.id, flush=True); time.sleep(60)")
            env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
            proc = subprocess.Popen([sys.executable, "-c", script, d.socket], stdout=subprocess.PIPE, text=True, env=env)
            job = int(proc.stdout.readline())
            self.assertEqual(proc.wait(30), -15)
            ended = d.finish(job)[0]
            self.assertEqual((ended["state"], ended["reason"]), ("failed", "time limit"))


if __name__ == "__main__":
    main()
