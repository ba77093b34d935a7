"""The event stream (docs/events.md): `gpupool events` lists what happened to jobs and GPUs, in
order, a reader following it sees each event as it comes (across a daemon restart too), the
on_event hook is run for the kinds it asks for with the event on its standard input and in its
environment, and another user's job details stay private under private_data."""
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import unittest

from harness import CAN_ADD_USERS, Daemon, LineReader, ThrowawayUsers, main, until_exists, wait_until

HOOK_CONFIG = """[events]
on_event = 'cat >> "$HOOK_DIR/events.jsonl"; echo "$GPUPOOL_EVENT $GPUPOOL_EVENT_JOB $GPUPOOL_EVENT_USER $GPUPOOL_EVENT_GPUS" >> "$HOOK_DIR/env.txt"'
on_event_kinds = ["job_ended", "job_failed", "job_requeued", "gpu_drained"]
"""


def events(d, *args, user=None):
    proc = d.gp("events", "--json", *args, user=user, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def follow(d, *args):
    """`gpupool events -f --json ARGS` in the background, and a reader of its lines."""
    proc = d.background("events", "-f", "--json", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, LineReader(proc.stdout)


def stop(follower):
    """Before the daemon stops: its check for processes left behind would find the follower."""
    follower.kill()
    follower.wait()
    follower.stdout.close()
    follower.stderr.close()


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def kinds_of(job, listed):
    return [e["kind"] for e in listed if e["job"] == job]


class EventsTest(unittest.TestCase):
    def test_a_jobs_life_in_order_for_readers_followers_and_the_hook(self):
        hook_dir = tempfile.mkdtemp(prefix="gpupool-hook-")
        self.addCleanup(shutil.rmtree, hook_dir, True)
        # The hook finds its directory in the daemon's environment, which it inherits.
        with Daemon(config=HOOK_CONFIG, env={"HOOK_DIR": hook_dir}) as d:
            follower, lines = follow(d)
            ok = d.submit("--name", "fine", "--", "true")
            failing = d.submit("--name", "flaky", "--retries", "1", "--", "sh", "-c", "exit 3")
            d.finish(ok, failing)

            listed = events(d, "-n", "100")
            self.assertEqual(kinds_of(ok, listed), ["job_started", "job_ended"])
            self.assertEqual(kinds_of(failing, listed), ["job_started", "job_requeued", "job_started", "job_failed"])
            self.assertEqual([e["seq"] for e in listed], sorted(e["seq"] for e in listed))
            [ended] = [e for e in listed if e["job"] == ok and e["kind"] == "job_ended"]
            self.assertEqual((ended["user"], ended["name"], len(ended["gpus"])), ("root", "fine", 1))
            self.assertRegex(ended["message"], rf"^job {ok} \(root, fine\) ended on GPU \d: after under a minute$")
            [failed] = [e for e in listed if e["kind"] == "job_failed"]
            self.assertEqual(failed["detail"], "exit code 3 after under a minute")

            # The follower saw the same events, in the same order, as they came.
            followed = []
            while not followed or followed[-1]["kind"] != "job_failed":
                followed.append(json.loads(lines.readline()))
            self.assertEqual([e["seq"] for e in followed], [e["seq"] for e in listed])

            # The hook ran for the kinds it asked for, one at a time, in the log's order (the two
            # jobs run side by side: which of the first job's end and the second's requeue comes
            # first is the machine's choice).
            asked = [e for e in listed if e["kind"] in ("job_ended", "job_requeued", "job_failed")]
            self.assertEqual(sorted((e["kind"], e["job"]) for e in asked),
                             sorted([("job_ended", ok), ("job_requeued", failing), ("job_failed", failing)]))
            env_file = os.path.join(hook_dir, "env.txt")
            wait_until(lambda: len(read_lines(env_file)) >= 3, what="the hook run three times")
            with open(env_file) as f:
                self.assertEqual([line.split()[:3] for line in f.read().splitlines()[:3]],
                                 [[e["kind"], str(e["job"]), "root"] for e in asked])
            with open(os.path.join(hook_dir, "events.jsonl")) as f:
                hooked = [json.loads(line) for line in f][:3]
            self.assertEqual([e["seq"] for e in hooked], [e["seq"] for e in asked])

            # Text for people; filters.
            text = d.gp("events", "--job", str(failing), check=True).stdout.splitlines()
            self.assertEqual(len(text), 4, text)
            self.assertRegex(text[-1], rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d  job_failed       job {failing} "
                                       rf"\(root, flaky\) failed on GPU \d: exit code 3 after under a minute$")
            self.assertEqual(len(events(d, "-n", "1")), 1)
            self.assertEqual([e["kind"] for e in events(d, "--since", "1h", "--kind", "job_requeued")], ["job_requeued"])
            # A name of 100 kB is cut, and every listing and the hook go on.
            long_named = d.submit("--name", "x" * 100_000, "--", "true")
            d.finish(long_named)
            [cut] = events(d, "--job", str(long_named), "--kind", "job_ended")
            self.assertEqual(cut["name"], "x" * 253 + "...")
            self.assertEqual(json.loads(lines.readline())["job"], long_named)  # the follower's started
            bad = d.gp("events", "--kind", "job_done")
            self.assertEqual(bad.returncode, 1)
            self.assertIn("unknown event 'job_done'", bad.stderr)
            stop(follower)

    def test_gpu_and_queue_events_name_the_running_jobs_and_outlive_a_restart(self):
        with Daemon() as d:
            wide = d.submit("-g", "8", "--", "sh", "-c", until_exists(d.path("go")))
            d.wait_state(wide, "running")
            follower, lines = follow(d, "--kind", "gpu_drained,queue_resumed")
            d.gp("drain", "--gpu", "3", "--reason", "fan noise", check=True)
            drained = json.loads(lines.readline())
            self.assertEqual((drained["kind"], drained["gpus"], drained["user"], drained["detail"]),
                             ("gpu_drained", [3], "root", "fan noise"))
            self.assertEqual((drained["jobs"], drained["users"]), ([wide], ["root"]))
            self.assertEqual(drained["message"], f"GPU 3 drained by root: fan noise; running there: job {wide} (root)")
            d.gp("resume", "--gpu", "3", check=True)
            d.gp("drain", check=True)
            last_before = events(d, "-n", "1")[0]["seq"]

            # The follower waits through a restart, and the numbers go on.
            self.assertEqual(d.stop(), 0)
            d.start()
            d.gp("resume", check=True)
            resumed = json.loads(lines.readline())
            self.assertEqual((resumed["kind"], resumed["user"]), ("queue_resumed", "root"))
            self.assertGreater(resumed["seq"], last_before)
            kinds = [e["kind"] for e in events(d, "--kind", "gpu_drained,gpu_resumed,queue_drained,queue_resumed")]
            self.assertEqual(kinds, ["gpu_drained", "gpu_resumed", "queue_drained", "queue_resumed"])
            d.touch("go")
            d.finish(wide)
            stop(follower)


@unittest.skipUnless(CAN_ADD_USERS, "needs root to add users")
class PrivateEventsTest(ThrowawayUsers, unittest.TestCase):
    def test_another_users_job_details_are_withheld_under_private_data(self):
        suffix = secrets.token_hex(3)
        alice, bob = self.add_user(f"gpev_alice_{suffix}"), self.add_user(f"gpev_bob_{suffix}")
        self.require_gpupool_runs_as(alice)
        with Daemon(config='private_data = ["jobs"]\n', mode=0o755) as d:
            job = d.submit("--name", "secret-name", "--", "sh", "-c", "exit 5", user=alice)
            d.finish(job)
            [theirs] = [e for e in events(d, user=bob) if e["kind"] == "job_failed"]
            self.assertTrue(theirs["private"])
            self.assertEqual((theirs["name"], theirs["detail"]), ("", ""))
            self.assertEqual(theirs["message"], f"job {job} ({alice}) failed on GPU {theirs['gpus'][0]}")
            [own] = [e for e in events(d, user=alice) if e["kind"] == "job_failed"]
            self.assertEqual(own["name"], "secret-name")
            self.assertIn("exit code 5", own["detail"])
            [admin] = [e for e in events(d) if e["kind"] == "job_failed"]
            self.assertEqual(admin["name"], "secret-name")


if __name__ == "__main__":
    main()
