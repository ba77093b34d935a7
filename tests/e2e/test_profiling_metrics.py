"""Profiling activity (NVML's GPM counters, Hopper on; docs/monitoring.md): the DCGM_FI_PROF_*
series on /metrics in dcgm-exporter's units, SM activity in the API and in `gpupool list --watch`,
and none of it on GPUs without the counters."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import GPUPOOL, Daemon, clean_env, main, wait_until
from test_monitoring import DCGM_LABEL_LINT, get, get_json, parse_metrics, series, write_overlay

MiB = 1024 * 1024
PROFILING = ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
             "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
             "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"]
# GPU 0 of the simulated H200 machine, in the fixture's (and dcgm-exporter's) units.
BUSY = {"gr_engine_active": 0.97, "sm_active": 0.85, "sm_occupancy": 0.4, "tensor_active": 0.62,
        "dram_active": 0.31, "fp64_active": 0, "fp32_active": 0.12, "fp16_active": 0.05,
        "pcie_tx_bytes_per_s": 3 * MiB, "pcie_rx_bytes_per_s": 1.5 * MiB,
        "nvlink_tx_bytes_per_s": 120000 * MiB, "nvlink_rx_bytes_per_s": 118000 * MiB}


class ProfilingMetricsTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-profiling-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        write_overlay(self.overlay, {0: dict(BUSY, utilization_gpu=100)})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def daemon(self, sim="hgx-h200", config=""):
        return Daemon(sim=sim, http="127.0.0.1:0", config=config, env={"GPUPOOL_SIM_STATE": self.overlay})

    def test_hopper_reports_activity_in_dcgm_units(self):
        with self.daemon() as d:
            address = d.http_address()

            def measured():
                text = get(address, "/metrics")[2]
                return series(parse_metrics(text), "DCGM_FI_PROF_SM_ACTIVE", gpu=0) and text
            text = wait_until(measured, what="the activity between two samples")
            samples = parse_metrics(text)
            for name in PROFILING:
                with self.subTest(name=name):
                    self.assertEqual(len(series(samples, name)), 8)
                    self.assertIn(f"# TYPE {name} gauge\n", text)
                    labels, _ = series(samples, name, gpu=0)[0]
                    self.assertEqual(set(labels), {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"})
                    # The other GPUs are idle: zero, reported.
                    self.assertEqual(series(samples, name, gpu=1)[0][1], 0)
            got = {name: series(samples, name, gpu=0)[0][1] for name in PROFILING}
            self.assertEqual(list(got), PROFILING)
            for name, value in zip(PROFILING, BUSY.values()):
                with self.subTest(name=name):
                    self.assertAlmostEqual(got[name], value, delta=abs(value) * 1e-9)

            if shutil.which("promtool") is None:
                self.skipTest("no promtool on PATH: the scrape's format is not checked")
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            complaints = [line for line in (lint.stdout + lint.stderr).splitlines() if not DCGM_LABEL_LINT.match(line)]
            self.assertEqual(complaints, [], "promtool check metrics")

    def test_api_and_list_show_sm_activity(self):
        with self.daemon() as d:
            address = d.http_address()
            gpu0 = wait_until(lambda: (g := get_json(address, "/api/gpus")["gpus"][0])["sample"]
                              and g["sample"]["sm_active"] is not None and g, what="SM activity in the API")
            self.assertAlmostEqual(gpu0["sample"]["sm_active"], 0.85)
            self.assertEqual(gpu0["sample"]["utilization_gpu"], 100)
            history = get_json(address, "/api/history?seconds=60")["gpus"][0]
            self.assertEqual(len(history["sm_active"]), len(history["time"]))
            self.assertIn(0.85, [round(v, 9) for v in history["sm_active"] if v is not None])

        # A single snapshot measures no activity; --watch does from its second table.
        env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_SIM_STATE=self.overlay,
                        GPUPOOL_RUNTIME_DIR=os.path.join(self.scratch, "run"))
        once = json.loads(subprocess.run([GPUPOOL, "list", "--json"], env=env, capture_output=True, text=True,
                                         check=True, timeout=60).stdout)
        self.assertIsNone(once[0]["sm_active"])
        self.assertNotIn(" SM ", subprocess.run([GPUPOOL, "list"], env=env, capture_output=True, text=True,
                                                check=True, timeout=60).stdout)
        self.assertAlmostEqual(self.watched(env, ["--json"], lambda line: json.loads(line)[0]["sm_active"]), 0.85)
        lines = []

        def table_with_sm(line):
            lines.append(line)
            if len(lines) >= 2 and lines[-2].startswith("GPU ") and " SM " in lines[-2]:
                return lines[-2], line
            return None
        header, row = self.watched(env, [], table_with_sm)
        self.assertRegex(header, r"^GPU NAME +MEMORY MiB UTIL   SM MEMBW")
        self.assertRegex(row, r"^  0 H200 .* 100%  85% ")

    def watched(self, env, args, found):
        """Reads `gpupool list --watch` until found(line) says something; stops it."""
        watch = subprocess.Popen([GPUPOOL, "list", "--watch", "-n", "0.2", *args], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for line in watch.stdout:
                value = found(line.rstrip("\n"))
                if value is not None:
                    return value
            self.fail(f"gpupool list --watch ended: {watch.stderr.read()}")
        finally:
            watch.kill()
            watch.wait(10)
            watch.stdout.close()
            watch.stderr.close()

    def test_each_gpu_instance_of_a_mig_gpu_has_its_own_series(self):
        # hgx-h200-mig's GPU 0: GPU instance 1 (4g.71gb) busy, instance 2 (3g.71gb) left idle.
        with open(os.path.join(os.environ.get("GPUPOOL_SOURCE_DIR", "."), "fixtures", "hgx-h200-mig.json")) as f:
            devices = json.load(f)["gpus"][0]["mig_devices"]
        devices[0] = dict(devices[0], sm_active=0.7, tensor_active=0.55)
        write_overlay(self.overlay, {0: {"mig_devices": devices}})
        with self.daemon(sim="hgx-h200-mig") as d:
            address = d.http_address()

            def measured():
                text = get(address, "/metrics")[2]
                return series(parse_metrics(text), "DCGM_FI_PROF_SM_ACTIVE", GPU_I_ID=2) and text
            samples = parse_metrics(wait_until(measured, what="the GPU instances' activity between two samples"))
            by_instance = {labels["GPU_I_ID"]: (labels["GPU_I_PROFILE"], round(value, 9))
                           for labels, value in series(samples, "DCGM_FI_PROF_SM_ACTIVE", gpu=0) if "GPU_I_ID" in labels}
            self.assertEqual(by_instance, {"1": ("4g.71gb", 0.7), "2": ("3g.71gb", 0)})
            [(labels, tensor)] = series(samples, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU_I_ID=1)
            self.assertAlmostEqual(tensor, 0.55, delta=1e-9)
            self.assertEqual(set(labels), {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                           "GPU_I_PROFILE", "GPU_I_ID"})
            self.assertEqual(labels["gpu"], "0")
            # The GPUs not in MIG mode have no GPU instance series.
            self.assertEqual([l for l, _ in series(samples, "DCGM_FI_PROF_SM_ACTIVE") if "GPU_I_ID" in l and l["gpu"] != "0"], [])

    def test_gpus_without_profiling_counters_have_no_series(self):
        write_overlay(self.overlay, {0: {"utilization_gpu": 100}})  # busy, as far as utilisation tells
        for sim in ("dgx-a100", "dgx-a100-mig"):  # Ampere: compute capability 8.0
            with self.subTest(sim=sim):
                self.expect_no_profiling_series(sim)

    def test_profiling_off_leaves_the_counters_unread(self):
        # GPU 0 of the Hopper machine is busy (BUSY, from setUp) but [monitor] profiling is off.
        self.expect_no_profiling_series("hgx-h200", config='[monitor]\nprofiling = "off"\n')

    def expect_no_profiling_series(self, sim, config=""):
        with self.daemon(sim=sim, config=config) as d:
            address = d.http_address()
            # Three samples taken, so any activity there was would have been measured.
            wait_until(lambda: len(get_json(address, "/api/history?seconds=60")["gpus"][0]["time"]) >= 3,
                       what="three samples")
            text = get(address, "/metrics")[2]
            self.assertTrue(series(parse_metrics(text), "DCGM_FI_DEV_GPU_UTIL", gpu=0), text)
            self.assertEqual([line for line in text.splitlines() if "DCGM_FI_PROF_" in line], [])
            self.assertIsNone(get_json(address, "/api/gpus")["gpus"][0]["sample"]["sm_active"])


if __name__ == "__main__":
    main()
