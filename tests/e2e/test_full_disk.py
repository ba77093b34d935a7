"""A full state filesystem (docs/daemon.md, "A full state filesystem"; docs/security.md): each
job's output is bounded (max_log_mb) and cut with one line, output stops while free space is under
the database's reserve (state_reserve_mb), jobs' ends reach the database once there is room
again, without a restart, and /metrics, `gpupool jobs` and `gpupool doctor` say when space is
short. The state directory is a small tmpfs, so filling it costs a few MiB of memory."""
import os
import re
import shutil
import subprocess
import unittest
import urllib.request

from harness import Daemon, main, until_exists, wait_until

MiB = 1 << 20
FILESYSTEM_MIB = 16
RESERVE_MIB = 4
CONFIG = f"max_log_mb = 1\nstate_reserve_mb = {RESERVE_MIB}\n"


def metric(address, name):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def fill(path, keep_free):
    """Writes a file of zeros at `path` until the filesystem has about `keep_free` bytes left (all
    of it, for 0). Stops quietly at ENOSPC."""
    with open(path, "ab") as f:
        while True:
            free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
            if free <= keep_free:
                return
            try:
                f.write(b"\0" * min(MiB, max(free - keep_free, 4096)))
                f.flush()
            except OSError:
                return


@unittest.skipIf(os.geteuid() != 0, "needs root to mount a small tmpfs as the state directory")
class FullDiskTest(unittest.TestCase):
    def daemon_on_tmpfs(self):
        d = Daemon(config=CONFIG, http="127.0.0.1:0")
        os.mkdir(d.state_dir, 0o755)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FILESYSTEM_MIB}m,mode=0755", "tmpfs",
                                  d.state_dir], capture_output=True, text=True)
        if mounted.returncode != 0:
            shutil.rmtree(d.root, ignore_errors=True)
            self.skipTest(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")

        def unmount():  # after the daemon has stopped (the with block), before its root goes
            subprocess.run(["umount", "-l", d.state_dir], capture_output=True)
            shutil.rmtree(d.root, ignore_errors=True)
        self.addCleanup(unmount)
        return d

    def read_log(self, d, job, stream="out"):
        with open(os.path.join(d.state_dir, "logs", f"{job}.{stream}"), "rb") as f:
            return f.read()

    def test_output_is_bounded_and_a_full_filesystem_loses_no_end(self):
        with self.daemon_on_tmpfs() as d:
            address = d.http_address()
            # 1. A job writing 3 MiB under a 1 MiB limit runs to its end; its log is cut with one line.
            loud = d.submit("--", "sh", "-c", "head -c 3145728 /dev/zero; echo after >&2; exit 0")
            ended = d.finish(loud)[0]
            self.assertEqual((ended["state"], ended["exit_code"]), ("done", 0), ended)
            out = self.read_log(d, loud)
            self.assertEqual(out[:MiB], b"\0" * MiB)
            self.assertEqual(out[MiB:].decode(),
                             f"\ngpupool: output cut at {MiB} bytes: the job reached its output limit (max_log_mb);"
                             " the rest is dropped\n")
            self.assertIn(b"output cut at", self.read_log(d, loud, "err"))
            self.assertEqual(d.status()["state_space"]["reserve_bytes"], RESERVE_MIB * MiB)

            # 2. Under the reserve: output is dropped with one line, the job still ends, and it is said.
            filler = os.path.join(d.state_dir, "filler")
            fill(filler, (RESERVE_MIB - 2) * MiB)
            quiet = d.submit("--", "sh", "-c", "head -c 100000 /dev/zero; exit 0")
            ended = d.finish(quiet)[0]
            self.assertEqual((ended["state"], ended["exit_code"]), ("done", 0), ended)
            self.assertRegex(self.read_log(d, quiet).decode(),
                             r"^gpupool: output dropped: the state filesystem is short of space \(\d+ bytes free, "
                             rf"{RESERVE_MIB * MiB} kept for the job database\)\n$")
            self.assertLess(metric(address, "gpupool_state_free_bytes"), RESERVE_MIB * MiB)
            self.assertEqual(metric(address, "gpupool_state_reserve_bytes"), RESERVE_MIB * MiB)
            self.assertIn("The state filesystem has", d.gp("jobs").stdout)
            doctor = d.gp("doctor")
            self.assertEqual(doctor.returncode, 2, doctor.stdout + doctor.stderr)
            self.assertRegex(doctor.stdout, r"(?m)^problem +state-space +the state filesystem is short of space")

            # 3. Full to the last byte: a job that ends meanwhile ends for `wait` and for `show`, and
            # its end is in the database once there is room, without a restart.
            flag = d.path("go")
            running = d.submit("--", "sh", "-c", until_exists(flag))
            d.wait_state(running, "running")
            fill(filler + "2", 0)
            waiter = d.background("wait", str(running), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_until(lambda: d.status() is not None, what="the daemon answering on a full filesystem")
            late = d.gp("submit", "--", "true")
            if late.returncode != 0:  # refused: one clear line; else stored and run
                self.assertRegex(late.stderr, r"^gpupool: the state filesystem is full: [^\n]*\n$")
            d.touch("go")
            _, waited_err = waiter.communicate(timeout=60)
            self.assertEqual(waiter.returncode, 0, waited_err)
            self.assertEqual(d.show(running)["state"], "done")
            os.remove(filler + "2")
            os.remove(filler)
            wait_until(lambda: d.status()["state_space"]["unsaved_jobs"] == 0, 60,
                       what="the daemon saving the ends the database refused")
            listed = d.gp_json("jobs", "--all", "--json")
            self.assertEqual({job["id"]: job["state"] for job in listed if job["id"] == running}, {running: "done"})
            if late.returncode == 0:
                d.finish(int(late.stdout))


if __name__ == "__main__":
    main()
