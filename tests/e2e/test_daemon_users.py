"""A root gpupoold shared by several users: jobs run as their submitter, each user's jobs, logs and
environment are theirs, and only administrators act on everyone's (docs/daemon.md, "Who may do
what" and "Files"). Needs root and useradd: it creates throwaway users and groups, and removes them."""
import grp
import os
import pwd
import secrets
import stat
import subprocess
import unittest

from harness import CAN_ADD_USERS, GPUPOOL, Daemon, LineReader, ThrowawayUsers, main, one_line


def sh(script):
    return ["--", "sh", "-c", script]


@unittest.skipUnless(CAN_ADD_USERS, "needs root, useradd, groupadd and setpriv to create throwaway users")
class UsersTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        suffix = secrets.token_hex(3)
        cls.admins = cls.add_group(f"gpt_admins_{suffix}")
        cls.team = cls.add_group(f"gpt_team_{suffix}")
        cls.alice = cls.add_user(f"gpt_alice_{suffix}", cls.team)
        cls.bob = cls.add_user(f"gpt_bob_{suffix}")
        cls.carol = cls.add_user(f"gpt_carol_{suffix}", cls.admins)  # an administrator
        cls.require_gpupool_runs_as(cls.alice)

    def daemon(self):
        d = Daemon(config=f'admin_group = "{self.admins}"\n', mode=0o755)
        for user in (self.alice, self.bob, self.carol):
            home = d.path(user)
            os.mkdir(home, 0o700)
            os.chown(home, pwd.getpwnam(user).pw_uid, -1)
        return d

    def test_a_job_runs_as_its_submitter(self):
        with self.daemon() as d:
            job = d.submit(*sh(f"id -u; id -g; id -G; umask; touch {d.path(self.alice, 'made')}"),
                           user=self.alice, cwd=d.path(self.alice), umask=0o027)
            self.assertEqual(d.wait(job, user=self.alice).returncode, 0)
            uid, gid, groups, mask = d.gp("logs", str(job), user=self.alice, check=True).stdout.splitlines()
            entry = pwd.getpwnam(self.alice)
            self.assertEqual(int(uid), entry.pw_uid)
            self.assertNotEqual(int(uid), 0)
            self.assertEqual(int(gid), entry.pw_gid)
            self.assertIn(grp.getgrnam(self.team).gr_gid, [int(g) for g in groups.split()])
            self.assertNotIn(0, [int(g) for g in groups.split()])
            self.assertEqual(mask, "0027")
            self.assertEqual(os.stat(d.path(self.alice, "made")).st_uid, entry.pw_uid)
            shown = d.gp_json("show", "--json", str(job), user=self.alice)
            self.assertEqual((shown["user"], shown["uid"]), (self.alice, entry.pw_uid))
            for log in (shown["stdout"], shown["stderr"]):
                st = os.stat(log)
                self.assertEqual(st.st_uid, entry.pw_uid, log)
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o600, log)

    def test_users_keep_to_their_own_jobs(self):
        with self.daemon() as d:
            home = d.path(self.alice)
            running = d.submit("-g", "8", *sh("echo private; sleep 60"), user=self.alice, cwd=home,
                               env={"E2E_SECRET": "alice-token"})
            held = d.submit("--", "true", user=self.alice, cwd=home)
            d.wait_state(running, "running")
            self.assertEqual({lease["user"] for lease in d.leases()}, {self.alice},
                             "the daemon's leases name the job's owner, not root")
            self.assertEqual(d.gp("hold", str(held), user=self.alice, cwd=home).returncode, 0)
            bob_home = d.path(self.bob)
            for action, job in (("cancel", running), ("hold", running), ("cancel", held), ("release", held)):
                with self.subTest(action=action, job=job):
                    proc = d.gp(action, str(job), user=self.bob, cwd=bob_home)
                    self.assertNotEqual(proc.returncode, 0)
                    self.assertTrue(one_line(proc), proc.stderr)
                    self.assertIn(self.alice, proc.stderr, "the message names the owner")
            self.assertEqual([d.job_state(running), d.job_state(held)], ["running", "held"])

            logs = d.gp("logs", str(running), user=self.bob, cwd=bob_home)
            self.assertNotEqual(logs.returncode, 0)
            self.assertTrue(one_line(logs), logs.stderr)
            self.assertIn(self.alice, logs.stderr)
            self.assertNotIn("private", logs.stdout)
            follow = d.gp("logs", "-f", str(running), user=self.bob, cwd=bob_home, timeout=30)
            self.assertNotEqual(follow.returncode, 0)
            self.assertTrue(one_line(follow), follow.stderr)
            self.assertNotIn("private", follow.stdout)
            log_file = d.show(running)["stdout"]
            peek = self.run_as(self.bob, "cat", log_file)
            self.assertNotEqual(peek.returncode, 0, "bob read alice's log file")
            own = d.gp("logs", str(running), user=self.alice, cwd=home, check=True)
            self.assertEqual(own.stdout, "private\n")

            as_bob = d.gp_json("show", "--json", str(running), user=self.bob, cwd=bob_home)
            self.assertNotIn("environment", as_bob)
            as_alice = d.gp_json("show", "--json", str(running), user=self.alice, cwd=home)
            self.assertIn("E2E_SECRET=alice-token", as_alice["environment"])
            listed = d.gp_json("jobs", "--json", user=self.bob, cwd=bob_home)
            self.assertEqual([j["id"] for j in listed], [running, held], "anyone may read the queue")
            self.assertEqual({j["user"] for j in listed}, {self.alice})
            self.assertTrue(all("environment" not in j for j in listed))

            for args in (["drain"], ["resume"]):
                proc = d.gp(*args, user=self.bob, cwd=bob_home)
                self.assertNotEqual(proc.returncode, 0, args)
                self.assertTrue(one_line(proc), proc.stderr)
            before = len(d.all_jobs())
            proc = d.gp("submit", "--priority", "1", "--", "true", user=self.bob, cwd=bob_home)
            self.assertNotEqual(proc.returncode, 0)
            self.assertTrue(one_line(proc), proc.stderr)
            self.assertEqual(len(d.all_jobs()), before, "a refused submission stored a job")
            self.assertEqual(d.gp("cancel", str(running), str(held), user=self.alice, cwd=home).returncode, 0)

    def test_administrators_act_on_everyones_jobs(self):
        with self.daemon() as d:
            bob_home, carol_home = d.path(self.bob), d.path(self.carol)
            job = d.submit(*sh("echo bob-output; echo bob-errors >&2; sleep 60"), user=self.bob, cwd=bob_home,
                           env={"E2E_SECRET": "b"})
            d.wait_state(job, "running")
            # The log files are bob's alone (0600): carol reads them through the daemon.
            peek = self.run_as(self.carol, "cat", d.show(job)["stdout"])
            self.assertNotEqual(peek.returncode, 0, "carol could read bob's log file herself")
            follow = d.background("logs", "-f", str(job), user=self.carol, cwd=carol_home,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            followed = LineReader(follow.stdout)
            self.assertEqual(followed.readline(timeout=30), "bob-output\n")
            self.assertIsNone(follow.poll(), "logs -f returned while the job runs")
            errors = d.gp("logs", "--stderr", str(job), user=self.carol, cwd=carol_home)
            self.assertEqual((errors.returncode, errors.stdout), (0, "bob-errors\n"), errors.stderr)
            as_carol = d.gp_json("show", "--json", str(job), user=self.carol, cwd=carol_home)
            self.assertIn("E2E_SECRET=b", as_carol["environment"])
            cancelled = d.gp("cancel", str(job), user=self.carol, cwd=carol_home)
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            shown = d.wait_state(job, "cancelled", "failed", "done")
            self.assertEqual(shown["state"], "cancelled")
            self.assertIn(self.carol, shown["reason"])
            self.assertEqual(follow.wait(timeout=30), 0, follow.stderr.read())
            self.assertEqual(followed.readline(timeout=5), "", "logs -f ends with the job")
            self.assertEqual(d.gp("drain", user=self.carol, cwd=carol_home).returncode, 0)
            self.assertEqual(d.gp("resume", user=self.carol, cwd=carol_home).returncode, 0)
            urgent = d.submit("--priority", "5", "--", "true", user=self.carol, cwd=carol_home)
            shown = d.finish(urgent)[0]
            self.assertEqual((shown["state"], shown["priority"]), ("done", 5))
            logs = d.gp("logs", str(job), user=self.carol, cwd=carol_home)
            self.assertEqual((logs.returncode, logs.stdout), (0, "bob-output\n"), logs.stderr)

    def test_files_have_the_documented_owners_and_modes(self):
        with self.daemon() as d:
            job = d.submit("--", "true", user=self.alice, cwd=d.path(self.alice),
                           env={"E2E_SECRET": "alice-token"})
            self.assertEqual(d.finish(job)[0]["state"], "done")

            def check(path, mode, uid=0, kind=None):
                st = os.lstat(path)
                self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid), (mode, uid), path)
                if kind:
                    self.assertTrue(kind(st.st_mode), path)

            check(d.socket, 0o666, kind=stat.S_ISSOCK)
            check(os.path.join(d.state_dir, "logs"), 0o755, kind=stat.S_ISDIR)
            check(os.path.join(d.state_dir, "attempts"), 0o700, kind=stat.S_ISDIR)
            alice = pwd.getpwnam(self.alice).pw_uid
            check(os.path.join(d.state_dir, "logs", f"{job}.out"), 0o600, alice)
            check(os.path.join(d.state_dir, "logs", f"{job}.err"), 0o600, alice)
            records = os.listdir(os.path.join(d.state_dir, "attempts"))
            self.assertEqual(records, [f"{job}.1"])
            check(os.path.join(d.state_dir, "attempts", records[0]), 0o600)
            # The database (and its WAL) holds every job's environment: only the daemon may read it.
            for name in sorted(os.listdir(d.state_dir)):
                path = os.path.join(d.state_dir, name)
                if os.path.isfile(path):
                    peek = self.run_as(self.bob, "grep", "-q", "alice-token", path)
                    self.assertNotEqual(peek.returncode, 0, f"bob found alice's secret in {path}")
                if name.startswith("gpupool.db"):
                    st = os.stat(path)
                    self.assertEqual(st.st_uid, 0, name)
                    self.assertEqual(st.st_mode & 0o077, 0, f"{name} has mode {stat.S_IMODE(st.st_mode):o}")

    def test_a_personal_daemon_serves_only_its_user(self):
        with Daemon(user=self.alice, mode=0o755) as d:
            alice = pwd.getpwnam(self.alice).pw_uid
            st = os.lstat(d.socket)
            self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid), (0o600, alice))
            job = d.submit(*sh("id -u"))
            self.assertEqual(d.finish(job)[0]["state"], "done")
            self.assertEqual(d.gp("logs", str(job), check=True).stdout, f"{alice}\n")
            self.assertEqual(d.show(job)["user"], self.alice)
            # Bob's client does not trust a socket that is neither root's nor his.
            refused = d.gp("submit", "--", "true", user=self.bob)
            self.assertNotEqual(refused.returncode, 0)
            self.assertTrue(one_line(refused), refused.stderr)
            self.assertIn(f"uid {alice}", refused.stderr)
            self.assertEqual(len(d.all_jobs()), 1)


if __name__ == "__main__":
    main()
