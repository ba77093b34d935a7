"""private_data (docs/configuration.md; docs/security.md, "Private data"): with
private_data = ["jobs", "usage"], a user sees of another user's jobs who holds which GPUs and
when, never what the job runs, where, its name or its GPU time, through every reader: jobs, show,
wait, top, report, the HTTP API and /metrics. The owner and administrators see everything, and a
client of protocol 1, which cannot read a withheld job, is never sent one. Needs root and
useradd: it creates throwaway users."""
import http.client
import json
import os
import pwd
import secrets
import unittest

from harness import CAN_ADD_USERS, Daemon, RawConnection, ThrowawayUsers, in_process_of, main, wait_until

# In the job's name, command and working directory; tables cut names short, so readers that must
# not show it are checked for its first part.
SECRET = "hush-" + secrets.token_hex(4)
TRACE = SECRET[:5]


def get(address, path):
    connection = http.client.HTTPConnection(address, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.read().decode()
    finally:
        connection.close()


@unittest.skipUnless(CAN_ADD_USERS, "needs root, useradd, groupadd and setpriv to create throwaway users")
class PrivateDataTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        suffix = secrets.token_hex(3)
        cls.admins = cls.add_group(f"gpp_admins_{suffix}")
        cls.alice = cls.add_user(f"gpp_alice_{suffix}")
        cls.bob = cls.add_user(f"gpp_bob_{suffix}")
        cls.carol = cls.add_user(f"gpp_carol_{suffix}", cls.admins)  # an administrator
        cls.require_gpupool_runs_as(cls.alice)

    def daemon(self, private):
        config = f'admin_group = "{self.admins}"\nprivate_data = {json.dumps(private)}\n'
        d = Daemon(config=config, mode=0o755, http="127.0.0.1:0")
        for user in (self.alice, self.bob, self.carol):
            home = d.path(user)
            os.mkdir(home, 0o700)
            os.chown(home, pwd.getpwnam(user).pw_uid, -1)
        return d

    def alices_job(self, d):
        work = d.path(self.alice, SECRET)
        os.mkdir(work)
        os.chown(work, pwd.getpwnam(self.alice).pw_uid, -1)
        job = d.submit("--name", f"{SECRET}-sweep", "--", "sh", "-c", f"sleep 120 # {SECRET}", user=self.alice,
                       cwd=work, env={"E2E_SECRET": SECRET})
        d.wait_state(job, "running")
        return job

    def as_user(self, d, user, *args):
        proc = d.gp(*args, user=user, cwd=d.path(user))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_other_users_see_who_holds_gpus_but_not_what_runs(self):
        with self.daemon(["jobs", "usage"]) as d:
            job = self.alices_job(d)
            own = d.submit("--", "sleep", "120", user=self.bob, cwd=d.path(self.bob))
            d.wait_state(own, "running")
            d.wait_for_samples(3)

            listed = {j["id"]: j for j in json.loads(self.as_user(d, self.bob, "jobs", "--json"))}
            theirs = listed[job]
            self.assertTrue(theirs["private"])
            self.assertEqual((theirs["user"], theirs["state"], len(theirs["gpus"])), (self.alice, "running", 1))
            for key in ("name", "command", "cwd", "environment", "stdout", "stderr", "pid", "usage"):
                self.assertNotIn(key, theirs)
            self.assertNotIn("private", listed[own], "bob's own job is shown whole")
            self.assertEqual(listed[own]["command"], ["sleep", "120"])
            self.assertIn("usage", listed[own])

            for args in (["jobs"], ["jobs", "--json"], ["show", str(job)], ["show", "--json", str(job)],
                         ["top", "--once"], ["report"], ["report", "--json"]):
                with self.subTest(args=args):
                    self.assertNotIn(TRACE, self.as_user(d, self.bob, *args))
            self.assertIn("(private)", self.as_user(d, self.bob, "jobs"))

            report = json.loads(self.as_user(d, self.bob, "report", "--json"))
            self.assertEqual({line["user"] for line in report["users"]}, {self.bob})
            self.assertEqual({line["id"] for line in report["jobs"]}, {own})

            for user in (self.alice, self.carol):
                with self.subTest(user=user):
                    shown = json.loads(self.as_user(d, user, "show", "--json", str(job)))
                    self.assertNotIn("private", shown)
                    self.assertEqual(shown["name"], f"{SECRET}-sweep")
                    self.assertIn(SECRET, shown["cwd"])
                    self.assertIn(TRACE, self.as_user(d, user, "jobs"))
                    report = json.loads(self.as_user(d, user, "report", "--json"))
                    self.assertIn(job, {line["id"] for line in report["jobs"]})
            carols = json.loads(self.as_user(d, self.carol, "report", "--json"))
            self.assertEqual({line["user"] for line in carols["users"]}, {self.alice, self.bob})

            # HTTP has no users: it shows what anyone may see.
            address = d.http_address()
            for path in ("/api/jobs", "/api/gpus", "/api/dashboard", "/metrics"):
                with self.subTest(path=path):
                    self.assertNotIn(TRACE, get(address, path))
            api = {j["id"]: j for j in json.loads(get(address, "/api/jobs"))["jobs"]}
            self.assertTrue(api[job]["private"])
            self.assertEqual(api[job]["user"], self.alice)
            self.assertNotIn("gpu_hours", api[job])
            metrics = get(address, "/metrics")
            self.assertIn("gpupool_idle_jobs", metrics)
            for name in ("gpupool_job_gpu_seconds", "gpupool_user_gpu_seconds_total", "gpupool_job_idle"):
                self.assertNotIn(name, metrics)

            # Protocol 1 cannot carry a withheld job: such a client is never told of it.
            uid = pwd.getpwnam(self.bob).pw_uid

            def old_client():
                with RawConnection(d.socket) as connection:
                    jobs = connection.request({"op": "jobs"})
                    shown = connection.exchange({"op": "show", "id": job})
                    return [j["id"] for j in jobs["jobs"]], shown
            ids, shown = in_process_of(uid, old_client)
            self.assertEqual(ids, [own])
            self.assertEqual(shown, {"ok": False, "error": f"no job {job}"})

    def test_private_jobs_alone_keep_usage_public_and_names_private(self):
        with self.daemon(["jobs"]) as d:
            job = self.alices_job(d)

            def reported():
                report = json.loads(self.as_user(d, self.bob, "report", "--json"))
                return next((line for line in report["jobs"] if line["id"] == job), None)
            line = wait_until(reported, what="alice's job in bob's report")
            self.assertEqual((line["user"], line["name"]), (self.alice, "(private)"))
            shown = json.loads(self.as_user(d, self.bob, "show", "--json", str(job)))
            self.assertTrue(shown["private"])
            self.assertIn("usage", shown)
            self.assertNotIn(TRACE, self.as_user(d, self.bob, "report"))
            metrics = wait_until(lambda: (text := get(d.http_address(), "/metrics")) and
                                 "gpupool_job_gpu_seconds" in text and text, what="per-job usage in /metrics")
            self.assertNotIn(TRACE, metrics)

    def test_without_private_data_the_queue_is_open_as_before(self):
        with self.daemon([]) as d:
            job = self.alices_job(d)
            shown = json.loads(self.as_user(d, self.bob, "show", "--json", str(job)))
            self.assertNotIn("private", shown)
            self.assertEqual(shown["name"], f"{SECRET}-sweep")
            self.assertNotIn("environment", shown, "another user's environment is never shown")


if __name__ == "__main__":
    main()
