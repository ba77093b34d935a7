"""The quarantine (docs/monitoring.md, "Health and quarantine"): a GPU that reports a hardware XID
or a pending row remap gets no new jobs, says why everywhere, stays out across a restart, and
returns by an administrator's `gpupool resume --gpu` or after a clean window."""
import json
import os
import time
import unittest

from harness import Daemon, main, until_exists, wait_until
from test_monitoring import get, parse_metrics, series, write_overlay


class QuarantineTest(unittest.TestCase):
    def setUp(self):
        self.overlay = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpupool-quarantine-{os.getpid()}.json")
        write_overlay(self.overlay, {})
        self.addCleanup(lambda: os.path.exists(self.overlay) and os.remove(self.overlay))

    def metric(self, address, name, gpu):
        [(_, value)] = series(parse_metrics(get(address, "/metrics")[2]), name, gpu=gpu)
        return value

    def test_a_hardware_xid_keeps_new_jobs_off_its_gpu_until_an_administrator_returns_it(self):
        with Daemon(http="127.0.0.1:0", env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            address = d.http_address()
            self.assertIn("gpupoold: watching critical XID events of 8 GPUs", d.log_text())
            self.assertEqual(self.metric(address, "DCGM_FI_DEV_XID_ERRORS", 2), 0)
            # A program's XID (13) says nothing about the GPU; a fall off the bus (79) does.
            write_overlay(self.overlay, {2: {"xid_events": [13]}})
            wait_until(lambda: "reported XID 13" in d.log_text(), what="the daemon seeing XID 13")
            d.wait_for_samples()
            self.assertNotIn("quarantined", d.log_text())
            write_overlay(self.overlay, {2: {"xid_events": [13, 79]}})
            wait_until(lambda: "GPU 2 quarantined: XID 79 (the GPU fell off the bus)" in d.log_text(),
                       what="GPU 2 quarantined")
            d.wait_for_samples()
            self.assertEqual(self.metric(address, "gpupool_gpu_quarantined", 2), 1)
            self.assertEqual(self.metric(address, "gpupool_gpu_quarantined", 1), 0)
            self.assertEqual(self.metric(address, "DCGM_FI_DEV_XID_ERRORS", 2), 79)

            # Seven GPUs run, never GPU 2; eight wait and say why.
            seven = d.submit("-g", "7", "--", "sh", "-c", until_exists(d.path("go")))
            shown = d.wait_state(seven, "running")
            self.assertNotIn(2, shown["gpus"])
            d.touch("go")
            d.finish(seven)
            eight = d.submit("-g", "8", "--", "true")
            wait_until(lambda: "quarantined: XID 79 (the GPU fell off the bus)" in d.show(eight)["reason"],
                       what="the wide job's wait reason naming the quarantine")
            self.assertEqual(d.show(eight)["wait_reason"], "Resources")
            jobs = d.gp("jobs", check=True).stdout
            self.assertIn("GPU 2 is quarantined since", jobs)
            self.assertIn("XID 79 (the GPU fell off the bus)", jobs)

            # A restart keeps it: the driver will not report that XID again.
            self.assertEqual(d.stop(), 0)
            d.start()
            d.wait_for_samples()
            self.assertEqual(d.show(eight)["state"], "queued")
            self.assertEqual([g["index"] for g in d.status()["quarantined_gpus"]], [2])

            # An administrator returns it.
            d.gp("resume", "--gpu", "2", check=True)
            self.assertEqual(d.finish(eight)[0]["state"], "done")
            self.assertIn("GPU 2 returned from quarantine by root", d.log_text())
            told = [json.loads(line) for line in d.gp("events", "--kind", "gpu_quarantined,gpu_returned", "--json",
                                                      check=True).stdout.splitlines()]
            self.assertEqual([(e["kind"], e["gpus"], e["detail"]) for e in told],
                             [("gpu_quarantined", [2], "XID 79 (the GPU fell off the bus)"),
                              ("gpu_returned", [2], "released by root")])
            self.assertEqual(d.status()["quarantined_gpus"], [])
            self.assertEqual(self.metric(d.http_address(starts=2), "gpupool_gpu_quarantined", 2), 0)

    def test_a_pending_row_remap_quarantines_until_a_reset_and_a_clean_window(self):
        config = '[monitor]\nquarantine_clean_window = "2s"\n'
        with Daemon(config=config, env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            write_overlay(self.overlay, {5: {"remapped_rows": 1, "row_remapping_pending": True}})
            wait_until(lambda: "GPU 5 quarantined: a row remap is pending (a reset applies it)" in d.log_text(),
                       what="GPU 5 quarantined")
            # Past the window (2 s; samples every 0.2 s): a lasting fault keeps it out.
            began = time.monotonic()
            while time.monotonic() - began < 3:
                d.wait_for_samples()
            self.assertNotIn("GPU 5 is back", d.log_text())
            write_overlay(self.overlay, {5: {"remapped_rows": 1}})  # a reset applied the remap
            wait_until(lambda: "GPU 5 is back from quarantine: no fault for" in d.log_text(),
                       what="GPU 5 back after its clean window")
            job = d.submit("-g", "8", "--", "true")
            self.assertEqual(d.finish(job)[0]["state"], "done")


if __name__ == "__main__":
    main()
