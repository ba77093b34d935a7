"""Files planted by a local user: the runtime directory is world-writable (1777), so anyone may put
links, FIFOs or files of their own under the names gpupool uses there, or make the runtime
directory itself one of theirs. Neither a root gpupoold nor another user's `gpupool run` may then
write or read anything its planter could not (docs/leases.md, "Files planted by others";
docs/daemon.md, "Files"). The same for the logs, and for requests about another user's job.
Needs root, useradd and setpriv: it creates throwaway users, and removes them."""
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import tempfile
import unittest

from harness import (CAN_ADD_USERS, GPUPOOL, Daemon, ThrowawayUsers, in_process_of, main, one_line,
                     read_if_there, until_exists, wait_until)


def fingerprint(path):
    """What must not change about a target: content, mode, owner, number of names."""
    st = os.lstat(path)
    with open(path, "rb") as f:
        return f.read(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_nlink


def exchange(path, messages, timeout=30, user=""):
    """Sends messages on one connection to the daemon at path (after the handshake) and returns
    every answer, errors included (Daemon.request raises on them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        lines = s.makefile("rwb")
        answers = []
        for message in [{"hello": "gpupool", "protocol": 1, "software": "e2e", "user": user}, *messages]:
            lines.write(json.dumps(message).encode() + b"\n")
            lines.flush()
            answers.append(json.loads(lines.readline() or b"null"))
        return answers[1:]


@unittest.skipUnless(CAN_ADD_USERS, "needs root, useradd, groupadd and setpriv to create throwaway users")
class PlantedFilesTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        suffix = secrets.token_hex(3)
        cls.admins = f"gpt_padm_{suffix}"
        cls.add_group(cls.admins)
        cls.alice = cls.add_user(f"gpt_palice_{suffix}")
        cls.mallory = cls.add_user(f"gpt_pmal_{suffix}")  # the one who plants
        cls.carol = cls.add_user(f"gpt_pcarol_{suffix}", cls.admins)  # an administrator
        cls.require_gpupool_runs_as(cls.alice)

    def uid(self, user):
        return pwd.getpwnam(user).pw_uid

    def setUp(self):
        # Targets: files of root's in a directory only root may enter (a secret and an
        # /etc/passwd-like file), and a file of alice's in her own directory.
        self.vault = tempfile.mkdtemp(prefix="gpupool-e2e-vault-")
        self.addCleanup(shutil.rmtree, self.vault, True)
        self.secret = os.path.join(self.vault, "shadow")
        self.passwd = os.path.join(self.vault, "passwd")
        for path, text, mode in ((self.secret, "root-secret\n", 0o600), (self.passwd, "root:x:0:0::/root:/bin/sh\n", 0o644)):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, mode)
        self.alice_dir = os.path.join(self.vault, "alice")
        os.mkdir(self.alice_dir, 0o700)
        os.chown(self.alice_dir, self.uid(self.alice), -1)
        self.alice_file = os.path.join(self.alice_dir, "notes")
        with open(self.alice_file, "w") as f:
            f.write("alice's\n")
        os.chmod(self.alice_file, 0o600)
        os.chown(self.alice_file, self.uid(self.alice), -1)
        os.chmod(self.vault, 0o711)  # others may reach alice's directory, not list the vault
        self.targets = [self.secret, self.passwd, self.alice_file]
        self.before = {path: fingerprint(path) for path in self.targets}

    def assert_targets_untouched(self):
        for path in self.targets:
            self.assertEqual(fingerprint(path), self.before[path], path)
        self.assertEqual(sorted(os.listdir(self.vault)), ["alice", "passwd", "shadow"])
        self.assertEqual(os.listdir(self.alice_dir), ["notes"])

    def daemon(self):
        d = Daemon(config=f'admin_group = "{self.admins}"\n', mode=0o755)
        for user in (self.alice, self.mallory, self.carol):
            home = d.path(user)
            os.mkdir(home, 0o700)
            os.chown(home, self.uid(user), -1)
        return d

    def make_runtime_dir(self, d):
        """The runtime directory as an administrator (or the package) creates it: root's, 1777."""
        for sub in ("", "locks", "holders", "queue"):
            path = os.path.join(d.runtime_dir, sub)
            os.mkdir(path)
            os.chmod(path, 0o1777)

    def plant(self, *argv):
        proc = self.run_as(self.mallory, *argv)
        self.assertEqual(proc.returncode, 0, f"{argv}: {proc.stderr}")

    def assert_lock_files_sound(self, d):
        for name in os.listdir(os.path.join(d.runtime_dir, "locks")):
            st = os.lstat(os.path.join(d.runtime_dir, "locks", name))
            self.assertTrue(stat.S_ISREG(st.st_mode), name)
            self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink), (0, 0o666, 1), name)

    def run_everywhere(self, d, user):
        """A batch job and a `gpupool run` of user's on all 8 GPUs; both must get them all."""
        job = d.submit("-g", "8", "--", "sh", "-c", "echo $GPUPOOL_GPUS", user=user, cwd=d.path(user))
        shown = d.finish(job)[0]
        self.assertEqual(shown["state"], "done", shown)
        self.assertEqual(d.gp("logs", str(job), user=user, check=True).stdout, "0,1,2,3,4,5,6,7\n")
        run = d.gp("run", "-g", "8", "--", "sh", "-c", "echo $GPUPOOL_GPUS", user=user, cwd=d.path(user))
        self.assertEqual((run.returncode, run.stdout), (0, "0,1,2,3,4,5,6,7\n"), run.stderr)

    # 1. Names in the runtime directory

    def test_links_and_files_planted_in_the_runtime_directory(self):
        d = self.daemon()
        self.make_runtime_dir(d)
        locks, holders, queue = (os.path.join(d.runtime_dir, sub) for sub in ("locks", "holders", "queue"))
        uuids = d.gpu_uuids()
        mallory_file = os.path.join(d.path(self.mallory), "mine")
        self.plant("sh", "-c", f"echo mallory > {mallory_file}; chmod 600 {mallory_file}")
        mallory_before = fingerprint(mallory_file)
        # Before the daemon starts: every GPU's lock file is something gpupool must not use.
        kinds = []
        for i, uuid in enumerate(uuids):
            lock = os.path.join(locks, f"{uuid}.lock")
            kind = ["secret", "passwd", "alice", "fifo", "own", "hardlink", "secret", "passwd"][i]
            kinds.append(kind)
            if kind == "fifo":
                self.plant("mkfifo", "-m", "666", lock)
            elif kind == "own":  # a regular lock file of hers, that nobody else may open
                self.plant("sh", "-c", f": > {lock}; chmod 600 {lock}")
            elif kind == "hardlink":
                self.plant("ln", mallory_file, lock)
            else:
                self.plant("ln", "-s", {"secret": self.secret, "passwd": self.passwd, "alice": self.alice_file}[kind],
                           lock)
            # The record names: old predictable temporary names, and records themselves.
            for pid in range(1, 4):
                self.plant("ln", "-s", self.secret, os.path.join(holders, f"{uuid}.0.{pid}.tmp"))
        self.plant("ln", "-s", self.secret, os.path.join(holders, "secret-record"))
        self.plant("mkfifo", "-m", "666", os.path.join(holders, "fifo-record"))
        self.plant("mkfifo", "-m", "666", os.path.join(queue, "0000000000000000000.1"))

        # Without a daemon, alice's `gpupool run` refuses, in one line, what it cannot replace.
        env = dict(d.env)
        run = self.run_as(self.alice, GPUPOOL, "run", "-g", "8", "--wait", "0", "--", "true", env=env,
                          cwd=d.path(self.alice))
        self.assertNotEqual(run.returncode, 0)
        self.assertTrue(one_line(run), run.stderr)
        self.assertIn("lock file", run.stderr)
        self.assert_targets_untouched()
        # Her own file, which she linked in as a lock file, is only hers again once root replaced the link.
        self.targets.append(mallory_file)
        self.before[mallory_file] = mallory_before

        with d:
            # The root daemon replaced what was planted and took over her lock file.
            self.run_everywhere(d, self.alice)
            self.assert_lock_files_sound(d)
            self.assert_targets_untouched()
            # She can no longer remove or rename a lock file (root's now, in a sticky directory).
            for argv in (["rm", "-f", os.path.join(locks, f"{uuids[4]}.lock")],
                         ["mv", os.path.join(locks, f"{uuids[4]}.lock"), os.path.join(locks, "x")],
                         ["chmod", "600", os.path.join(locks, f"{uuids[4]}.lock")]):
                self.assertNotEqual(self.run_as(self.mallory, *argv).returncode, 0, argv)

            # While it runs: records under the daemon's own pid, links and FIFOs among the records.
            pid = d.status()["pid"]
            for uuid in uuids:
                self.plant("ln", "-s", self.secret, os.path.join(holders, f"{uuid}.0.{pid}.tmp"))
            forged = os.path.join(d.path(self.mallory), "forged")
            self.plant("sh", "-c", f"""echo '{{"uuid":"{uuids[0]}","index":0,"pid":1,"user":"root","job":"forged",\
"since":4000000000,"slice_mib":null,"ranges":[[0,0]]}}' > {forged}""")
            self.plant("ln", "-s", forged, os.path.join(holders, f"{uuids[0]}.0.1"))
            self.plant("cp", forged, os.path.join(holders, f"{uuids[0]}.0.2"))  # hers, naming root
            self.plant("mkfifo", "-m", "666", os.path.join(holders, "fifo-record-2"))
            holder = d.submit("-g", "8", "--", "sh", "-c", until_exists(d.path("go")), user=self.alice,
                              cwd=d.path(self.alice))
            d.wait_state(holder, "running")
            leases = d.leases()  # root reads the records: no hang, nothing forged, nothing through a link
            self.assertEqual(len(leases), 8, leases)
            self.assertEqual({lease["user"] for lease in leases}, {self.alice})
            as_alice = self.run_as(self.alice, GPUPOOL, "leases", "--json", env=d.env)
            self.assertEqual(as_alice.returncode, 0, as_alice.stderr)
            self.assertEqual(len(json.loads(as_alice.stdout)), 8)
            # She can lock no GPU the daemon's job holds.
            took = self.run_as(self.mallory, GPUPOOL, "run", "--wait", "0", "--", "true", env=d.env)
            self.assertNotEqual(took.returncode, 0)
            d.touch("go")
            self.assertEqual(d.finish(holder)[0]["state"], "done")
            self.run_everywhere(d, self.alice)
            self.assertNotIn("forged", d.gp("leases", check=True).stdout)
            self.assert_targets_untouched()
            self.assert_lock_files_sound(d)

    def test_a_socket_name_planted_before_the_daemon_starts(self):
        d = self.daemon()
        try:
            self.make_runtime_dir(d)
            self.plant("ln", "-s", self.secret, d.socket)
            proc = d.popen("--http", "off")
            self.assertNotEqual(proc.wait(timeout=30), 0)
            log = d.log_text().strip().splitlines()
            self.assertEqual(len(log), 1, log)
            self.assertIn(f"belongs to uid {self.uid(self.mallory)}", log[0])
            self.assert_targets_untouched()
            # An administrator removes it; then the daemon starts, and alice's client talks to it.
            os.unlink(d.socket)
            with d:
                self.run_everywhere(d, self.alice)
        finally:
            shutil.rmtree(d.root, ignore_errors=True)

    # 2. The runtime directory itself

    def test_a_runtime_directory_that_is_not_roots(self):
        base = tempfile.mkdtemp(prefix="gpupool-e2e-tmp-")  # like /tmp: everyone's, sticky
        self.addCleanup(shutil.rmtree, base, True)
        os.chmod(base, 0o1777)
        mallory_dir = os.path.join(base, "mallory")
        self.plant("mkdir", "-m", "755", mallory_dir)
        cases = [("a link to root's directory", os.path.join(base, "link"), ["ln", "-s", self.vault],
                  "must be a directory"),
                 ("a directory she owns", os.path.join(base, "own"), ["mkdir", "-m", "1777"],
                  f"belongs to {self.mallory} (uid {self.uid(self.mallory)}), not root"),
                 ("in a directory she owns", os.path.join(mallory_dir, "run"), None,
                  f"{mallory_dir} belongs to uid {self.uid(self.mallory)}")]
        for what, runtime, make, message in cases:
            with self.subTest(what):
                if make:
                    self.plant(*make, runtime)
                d = self.daemon()
                try:
                    d.env["GPUPOOL_RUNTIME_DIR"] = runtime
                    run = self.run_as(self.alice, GPUPOOL, "run", "--", "true", env=d.env, cwd=d.path(self.alice))
                    self.assertNotEqual(run.returncode, 0)
                    self.assertTrue(one_line(run), run.stderr)
                    self.assertIn(message, run.stderr)
                    proc = d.popen("--http", "off")
                    if make:
                        # Planted in a sticky directory: a root daemon moves it aside whole and makes its own.
                        wait_until(lambda: "gpupoold: serving" in d.log_text() or proc.poll() is not None,
                                   what="gpupoold serving")
                        self.assertIsNone(proc.poll(), d.log_text())
                        self.assertIn(f"{runtime} belonged to {self.mallory} (uid {self.uid(self.mallory)}), not root: "
                                      f"moved it to {runtime}.not-roots-", d.log_text())
                        status = os.lstat(runtime)
                        self.assertEqual((stat.S_ISDIR(status.st_mode), status.st_uid), (True, 0))
                        proc.terminate()
                        self.assertEqual(proc.wait(timeout=30), 0, d.log_text())
                    else:
                        self.assertNotEqual(proc.wait(timeout=30), 0)
                        log = d.log_text().strip().splitlines()
                        self.assertEqual(len(log), 1, log)
                        self.assertIn(message, log[0])
                    self.assert_targets_untouched()
                    self.assertFalse(os.path.exists(os.path.join(mallory_dir, "run")), "root created it")
                finally:
                    shutil.rmtree(d.root, ignore_errors=True)

    # 3. Logs

    def test_a_user_cannot_pass_off_another_file_as_their_log(self):
        with self.daemon() as d:
            home = d.path(self.alice)
            job = d.submit("--retries", "1", "--", "sh", "-c", f"echo attempt; {until_exists(d.path('go'))}; exit 3",
                           user=self.alice, cwd=home)
            d.wait_state(job, "running")
            log = d.show(job)["stdout"]
            logs_dir = os.path.dirname(log)
            # "running" is stored before the supervisor creates the log: wait for the job's first
            # line, so that `rm -f` below meets the file (on nothing it would succeed).
            wait_until(lambda: read_if_there(log) == "attempt\n", what="the job's first line")
            # Her file, in the daemon's directory: she can neither remove nor rename it, nor add a name.
            for argv in (["rm", "-f", log], ["mv", log, log + ".old"], ["ln", "-s", self.secret, log + ".x"],
                         ["ln", log, log + ".y"]):
                self.assertNotEqual(self.run_as(self.alice, *argv).returncode, 0, argv)
            self.assertEqual(sorted(os.listdir(logs_dir)), [f"{job}.err", f"{job}.out"])
            # Were it a link to root's secret all the same (as only root could make it), an
            # administrator's `gpupool logs` would not read through it, and a retry not append to it.
            os.rename(log, log + ".real")
            os.symlink(self.secret, log)
            logs = d.gp("logs", str(job), user=self.carol, cwd=d.path(self.carol))
            self.assertNotEqual(logs.returncode, 0)
            self.assertTrue(one_line(logs), logs.stderr)
            self.assertIn("not a regular file", logs.stderr)
            self.assertNotIn("root-secret", logs.stdout)
            d.touch("go")
            shown = d.finish(job)[0]
            self.assertEqual(shown["state"], "failed", shown)
            self.assertIn("could not start", shown["reason"])
            self.assert_targets_untouched()

    # 4. Requests about another user's job

    def test_requests_about_another_users_job_are_refused(self):
        with self.daemon() as d:
            home = d.path(self.alice)
            running = d.submit("--", "sh", "-c", until_exists(d.path("go")), user=self.alice, cwd=home,
                               env={"E2E_SECRET": "alice-token"})
            held = d.submit("--hold", "--", "true", user=self.alice, cwd=home)
            d.wait_state(running, "running")
            mallory = self.uid(self.mallory)

            def as_mallory(*messages):
                return in_process_of(mallory, lambda: exchange(d.socket, list(messages)))

            for op, job in (("cancel", running), ("hold", running), ("cancel", held), ("release", held)):
                with self.subTest(op=op, job=job):
                    [answer] = as_mallory({"op": op, "ids": [job]})
                    [outcome] = answer["outcomes"]
                    self.assertIn(self.alice, outcome.get("error", ""), answer)
            [logs] = as_mallory({"op": "logs", "id": running, "open": "stdout"})
            self.assertFalse(logs["ok"], logs)
            [shown] = as_mallory({"op": "show", "id": running})
            self.assertNotIn("environment", shown["jobs"][0])
            for op in ("drain", "resume"):
                [answer] = as_mallory({"op": op})
                self.assertFalse(answer["ok"], answer)
            # `finished` ends only the lease granted on its own connection.
            [finished] = as_mallory({"op": "finished", "exit_code": 0, "signal": None})
            self.assertFalse(finished["ok"], finished)
            # The hello's user is not who she is: her submission is hers.
            [submitted] = in_process_of(mallory, lambda: exchange(d.socket, [
                {"op": "submit", "job": {"command": ["true"], "cwd": "/", "priority": 0}}], user=self.alice))
            self.assertEqual(d.show(submitted["id"])["user"], self.mallory)
            [urgent] = as_mallory({"op": "submit", "job": {"command": ["true"], "cwd": "/", "priority": 1}})
            self.assertFalse(urgent["ok"], urgent)
            self.assertEqual([d.job_state(running), d.job_state(held)], ["running", "held"])
            d.touch("go")
            self.assertEqual(d.finish(running)[0]["state"], "done")
            d.request({"op": "cancel", "ids": [held]})


if __name__ == "__main__":
    main()
