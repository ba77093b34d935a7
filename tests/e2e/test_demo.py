"""scripts/demo's main part (`scripts/demo --no-build BUILD_DIR`) with this build's programs:
gpupoold on a simulated 8-GPU machine, a burst of jobs from two users (as root; the caller alone
otherwise), every job done, and everything the demo started stopped and removed when it ends."""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN_DIR, SOURCE_DIR, clean_env, main, processes_under

DEMO = os.path.join(SOURCE_DIR, "scripts", "demo")
DEMO_USERS = ("gp-alice", "gp-bob")
TWO_USERS = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("useradd", "userdel", "setpriv"))


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class DemoTest(unittest.TestCase):
    def test_the_demo_runs_both_users_jobs_and_leaves_nothing_behind(self):
        parent = tempfile.mkdtemp(prefix="gpupool-e2e-demo-")
        os.chmod(parent, 0o755)  # the demo's users reach its programs and socket through it
        self.addCleanup(shutil.rmtree, parent, ignore_errors=True)
        existed = {user: user_exists(user) for user in DEMO_USERS}
        build_dir = os.path.dirname(os.path.abspath(BIN_DIR))
        # The demo's temporary root goes under parent (mktemp honours TMPDIR), where the test finds
        # whatever it would leave behind.
        proc = subprocess.run([DEMO, "--no-build", build_dir], env=clean_env(TMPDIR=parent),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        out = proc.stdout
        self.assertEqual(proc.returncode, 0, f"{out}\n{proc.stderr}")

        for header in ("== gpupoold", "== gpupool submit", "== gpupool jobs", "== gpupool top --once",
                       "== gpupool wait", "== gpupool report"):
            self.assertIn(f"\n{header}", "\n" + out)
        submitted = re.findall(r"^(\S+) +gpupool submit .* -> job (\d+)$", out, re.M)
        users = {user for user, _ in submitted}
        self.assertEqual(users, set(DEMO_USERS) if TWO_USERS else {pwd.getpwuid(os.geteuid()).pw_name})
        options = " ".join(line for line in out.splitlines() if " gpupool submit " in line)
        for size in ("-g 1 ", "-g 2 ", "-g 4 ", "--mem 20G "):
            self.assertIn(size, options)
        # `gpupool wait` says in one line how the burst ended: every job done.
        self.assertIn(f"\ngpupool: {len(submitted)} jobs: {len(submitted)} done\n", out)
        report = out.split("\n== gpupool report")[1]
        for user in users:
            self.assertIn(user, report)

        # Nothing left: no process of the demo, no temporary root, no user it created.
        self.assertEqual(processes_under(parent), [])
        self.assertEqual(os.listdir(parent), [])
        for user, was_there in existed.items():
            self.assertEqual(user_exists(user), was_there, user)


if __name__ == "__main__":
    main()
