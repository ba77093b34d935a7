"""The runtime directory deleted under a running daemon (docs/leases.md, "The runtime directory
deleted"): the daemon makes it again with its socket and locks its running jobs' GPUs in it
again, so that clients reach it and no other lease can be granted on those GPUs."""
import os
import shutil
import unittest

from harness import Daemon, main, until_exists, wait_until


class RuntimeDirectoryDeletedTest(unittest.TestCase):
    def test_the_daemon_makes_it_again_and_keeps_its_jobs_gpus(self):
        with Daemon() as d:
            job = d.submit("-g", "2", "--", "sh", "-c", until_exists(d.path("go")))
            gpus = d.wait_state(job, "running")["gpu_uuids"]
            self.assertEqual(sorted(d.held_gpus()), sorted(gpus))
            # Moved aside in one step, then deleted: the daemon may make the directory again at any
            # moment, and an `rm -rf` still under way would then fail on the one it made.
            aside = d.runtime_dir + ".deleted"
            os.rename(d.runtime_dir, aside)
            shutil.rmtree(aside)
            wait_until(lambda: f"gpupoold: the lease directory {d.runtime_dir} was deleted" in d.log_text(),
                       what="the daemon noticing the directory gone")
            wait_until(lambda: d.status() is not None, what="the daemon's socket back")
            # Held again, by the daemon for the job: what a `gpupool run` without the daemon checks.
            self.assertEqual(sorted(d.held_gpus()), sorted(gpus))
            holders = {lease["uuid"]: lease["job"] for lease in d.leases()}
            self.assertEqual({uuid: holders.get(uuid) for uuid in gpus}, {uuid: f"job-{job}" for uuid in gpus})
            # Through the daemon, the other six are free and the job's two are not.
            six = d.gp("run", "--wait=10s", "-g", "6", "--", "true")
            self.assertEqual(six.returncode, 0, six.stderr)
            eight = d.gp("run", "--wait=0", "-g", "8", "--", "true")
            self.assertNotEqual(eight.returncode, 0)
            d.touch("go")
            self.assertEqual(d.finish(job)[0]["state"], "done")
            wait_until(lambda: d.held_gpus() == [], what="the daemon letting its locks for the job go")
            eight = d.gp("run", "--wait=10s", "-g", "8", "--", "true")
            self.assertEqual(eight.returncode, 0, eight.stderr)


if __name__ == "__main__":
    main()
