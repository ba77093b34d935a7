"""Link errors (docs/monitoring.md, docs/doctor.md): the NVLink error totals NVML gives as field
values and the PCIe replay counter, as dcgm-exporter's series on /metrics and in `gpupool doctor`'s
link-errors check; absent, never 0, on a GPU without NVLink."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import GPUPOOL, Daemon, clean_env, main, wait_until
from test_monitoring import get, get_json, parse_metrics, series, write_overlay

NVLINK = {"nvlink_crc_flit_errors": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
          "nvlink_crc_data_errors": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
          "nvlink_replay_errors": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
          "nvlink_recovery_errors": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"}
GPU3_ERRORS = {"nvlink_crc_flit_errors": 4, "nvlink_crc_data_errors": 1, "nvlink_replay_errors": 7,
               "nvlink_recovery_errors": 2}


class LinkErrorsTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-link-errors-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        # GPU 3's links: every kind of error once or more; GPU 5's PCIe link replayed.
        write_overlay(self.overlay, {3: GPU3_ERRORS, 5: {"pcie_replay_count": 9}})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def test_nvlink_error_totals_are_dcgm_series(self):
        with Daemon(sim="hgx-h200", http="127.0.0.1:0", env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            address = d.http_address()
            text = wait_until(lambda: (t := get(address, "/metrics")[2]) and "DCGM_FI_DEV_NVLINK_" in t and t,
                              what="the NVLink series")
            samples = parse_metrics(text)
            for key, name in NVLINK.items():
                with self.subTest(name=name):
                    self.assertEqual(len(series(samples, name)), 8)
                    self.assertEqual(series(samples, name, gpu=3)[0][1], GPU3_ERRORS[key])
                    self.assertEqual(series(samples, name, gpu=0)[0][1], 0)
            self.assertEqual(series(samples, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu=5)[0][1], 9)

    def test_a_gpu_without_nvlink_has_no_nvlink_series(self):
        with Daemon(sim="h200-1", http="127.0.0.1:0") as d:
            address = d.http_address()
            wait_until(lambda: len(get_json(address, "/api/history?seconds=60")["gpus"][0]["time"]) >= 2,
                       what="two samples")
            text = get(address, "/metrics")[2]
            self.assertTrue(series(parse_metrics(text), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu=0), text)
            self.assertNotIn("DCGM_FI_DEV_NVLINK_", text)

    def test_doctor_tells_what_the_errors_mean(self):
        env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_SIM_STATE=self.overlay,
                        GPUPOOL_RUNTIME_DIR=os.path.join(self.scratch, "run"), HOME="/nonexistent")
        proc = subprocess.run([GPUPOOL, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=60)
        found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}
        links = found["link-errors"]
        self.assertEqual(links["status"], "warning", links)
        self.assertEqual(links["summary"], "NVLink errors on GPU 3")
        self.assertIn("GPU 3: PCIe replays 0; NVLink CRC errors 4 (flow control), 1 (data), replays 7, recoveries 2",
                      links["evidence"])
        self.assertIn("nvidia-smi nvlink -e -i N", links["fix"])

        write_overlay(self.overlay, {5: {"pcie_replay_count": 9}})
        proc = subprocess.run([GPUPOOL, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=60)
        links = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}["link-errors"]
        self.assertEqual((links["status"], links["summary"]), ("warning", "PCIe replays on GPU 5"))
        self.assertIn("reseat", links["fix"])


if __name__ == "__main__":
    main()
