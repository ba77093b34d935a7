"""A runtime directory made first by a user (docs/leases.md, "The runtime directory"): on a
machine without the package anyone may make /tmp/gpupool before everyone else. It is never used
silently by another user, who is told whose it is and what to do; a root gpupoold moves it aside
and makes its own."""
import os
import secrets
import unittest

from harness import CAN_ADD_USERS, GPUPOOL, Daemon, ThrowawayUsers, main


@unittest.skipUnless(CAN_ADD_USERS, "needs root, useradd, groupadd and setpriv to create throwaway users")
class SquattedRuntimeDirectoryTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        suffix = secrets.token_hex(3)
        cls.squatter = cls.add_user(f"gpt_squat_{suffix}")
        cls.other = cls.add_user(f"gpt_other_{suffix}")
        cls.require_gpupool_runs_as(cls.other)

    def test_a_users_runtime_directory_is_refused_then_taken_back_by_the_daemon(self):
        d = Daemon(mode=0o755)
        # Where /tmp would be: root's, sticky, writable by all.
        shared = os.path.join(d.root, "tmp")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        d.runtime_dir = os.path.join(shared, "gpupool")
        d.socket = os.path.join(d.runtime_dir, "gpupoold.sock")
        d.env["GPUPOOL_RUNTIME_DIR"] = d.runtime_dir
        made = self.run_as(self.squatter, "sh", "-c", f"mkdir {d.runtime_dir} && chmod 1777 {d.runtime_dir}")
        self.assertEqual(made.returncode, 0, made.stderr)
        squatted = os.stat(d.runtime_dir)

        refused = self.run_as(self.other, GPUPOOL, "run", "--", "true", env=d.env)
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertEqual(refused.stderr.count("\n"), 1, refused.stderr)
        self.assertIn(f"{d.runtime_dir} belongs to {self.squatter} (uid {squatted.st_uid}), not root", refused.stderr)
        self.assertIn("Install the gpupool package", refused.stderr)
        self.assertFalse(os.path.exists(os.path.join(d.runtime_dir, "locks")), "nothing was made in it")

        with d:
            self.assertIn(f"gpupoold: {d.runtime_dir} belonged to {self.squatter}", d.log_text())
            now = os.stat(d.runtime_dir)
            self.assertEqual((now.st_uid, now.st_mode & 0o7777), (0, 0o1777))
            aside = [name for name in os.listdir(shared) if name.startswith("gpupool.not-roots-")]
            self.assertEqual(len(aside), 1, os.listdir(shared))
            self.assertEqual(os.stat(os.path.join(shared, aside[0])).st_ino, squatted.st_ino, "moved whole")
            ran = self.run_as(self.other, GPUPOOL, "run", "--", "true", env=d.env)
            self.assertEqual(ran.returncode, 0, ran.stderr)


if __name__ == "__main__":
    main()
