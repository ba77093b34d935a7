"""gpupool list / topo on every simulated machine, through the real NVML code path."""
import os
import subprocess
import unittest

from harness import GPUPOOL, SHIPPED_FIXTURES, TEST_FIXTURES, clean_env, gpupool, gpupool_json, main

REQUIRED_FIELDS = ["index", "uuid", "pci_bus_id", "name", "memory_total_mib", "memory_used_mib",
                   "utilization_gpu", "temperature_c", "power_w", "processes"]


class ListTest(unittest.TestCase):
    def test_every_fixture_lists_its_gpus_with_the_contract_fields(self):
        expected_counts = {"dgx1-v100": 8, "dgx-a100": 8, "hgx-h200": 8, "pcie-4gpu": 4,
                           "mixed-workstation": 2, "h200-1": 1, "dgx-a100-mig": 8, "hgx-h200-mig": 8,
                           "a100-mig-mixed": 4}
        for fixture in SHIPPED_FIXTURES:
            with self.subTest(fixture=fixture):
                gpus = gpupool_json("list", "--json", sim=fixture)
                self.assertEqual(len(gpus), expected_counts[fixture])
                self.assertEqual([g["index"] for g in gpus], list(range(len(gpus))))
                for gpu in gpus:
                    for field in REQUIRED_FIELDS:
                        self.assertIn(field, gpu)
                    self.assertRegex(gpu["uuid"], r"^GPU-[0-9a-f]{8}-")
                    self.assertIsInstance(gpu["processes"], list)

    def test_h200_fixture_matches_the_real_machine(self):
        (gpu,) = gpupool_json("list", "--json", sim="h200-1")
        self.assertEqual(gpu["uuid"], "GPU-16fb8516-9f03-8d84-eb33-9dfbc4d69c74")
        self.assertEqual(gpu["pci_bus_id"], "00000000:00:06.0")
        self.assertEqual(gpu["memory_total_mib"], 143771)
        self.assertEqual(gpu["memory_used_mib"], 0)
        self.assertEqual(gpu["memory_free_mib"], 143155)
        self.assertEqual(gpu["compute_capability"], "9.0")
        self.assertEqual(gpu["multiprocessors"], 132)
        self.assertEqual(gpu["power_limit_w"], 700.0)

    def test_text_table_fits_80_columns(self):
        for fixture in SHIPPED_FIXTURES:
            with self.subTest(fixture=fixture):
                out = gpupool("list", sim=fixture).stdout
                self.assertIn("GPU NAME", out)
                for line in out.splitlines():
                    self.assertLessEqual(len(line), 80, line)

    def test_processes_are_named_from_proc(self):
        # A real process of ours, announced by the simulated driver through the overlay file.
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            state = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpupool-e2e-{os.getpid()}.json")
            with open(state, "w") as f:
                f.write('{"gpus": {"1": {"processes": [{"pid": %d, "used_memory_mib": 1234, "kind": "compute"}]}}}' % sleeper.pid)
            gpus = gpupool_json("list", "--json", sim="pcie-4gpu", env={"GPUPOOL_SIM_STATE": state})
            (proc,) = gpus[1]["processes"]
            self.assertEqual(proc["pid"], sleeper.pid)
            self.assertEqual(proc["used_memory_mib"], 1234)
            self.assertEqual(proc["command"], "sleep 60")
            self.assertTrue(proc["user"])
            os.unlink(state)
        finally:
            sleeper.kill()
            sleeper.wait()

    def test_unsupported_fields_are_null_never_zero(self):
        gpus = gpupool_json("list", "--json", sim=os.path.join(TEST_FIXTURES, "old-driver.json"))
        self.assertTrue(any(g[f] is None for g in gpus for f in REQUIRED_FIELDS if f != "processes"))
        out = gpupool("list", sim=os.path.join(TEST_FIXTURES, "old-driver.json")).stdout
        self.assertIn("n/a", out)

    def test_a_lost_gpu_is_reported_and_the_others_still_listed(self):
        gpus = gpupool_json("list", "--json", sim=os.path.join(TEST_FIXTURES, "lost-gpu.json"))
        self.assertEqual(len(gpus), 4)
        self.assertIsNotNone(gpus[2]["fault"])
        self.assertIsNone(gpus[2]["memory_total_mib"])
        self.assertTrue(gpus[2]["uuid"].startswith("GPU-"))
        self.assertEqual([g["fault"] for i, g in enumerate(gpus) if i != 2], [None, None, None])
        self.assertIn("FAULT", gpupool("list", sim=os.path.join(TEST_FIXTURES, "lost-gpu.json")).stdout)


class TopoTest(unittest.TestCase):
    def test_dgx1_hybrid_cube_mesh(self):
        topo = gpupool_json("topo", "--json", sim="dgx1-v100")
        self.assertEqual(topo["matrix"][0], ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"])
        self.assertEqual(topo["matrix"][7], ["SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"])
        self.assertEqual(len(topo["links"]), 28)
        self.assertEqual([g["numa_node"] for g in topo["gpus"]], [0, 0, 0, 0, 1, 1, 1, 1])

    def test_nvswitch_machines_are_fully_connected(self):
        for fixture, links in (("hgx-h200", 18), ("dgx-a100", 12)):
            with self.subTest(fixture=fixture):
                topo = gpupool_json("topo", "--json", sim=fixture)
                for link in topo["links"]:
                    self.assertEqual(link["nvlinks"], links)
                    self.assertTrue(link["via_nvswitch"])

    def test_pcie_levels(self):
        topo = gpupool_json("topo", "--json", sim="pcie-4gpu")
        self.assertEqual(topo["matrix"][0], ["X", "PIX", "SYS", "SYS"])
        self.assertEqual(topo["matrix"][2], ["SYS", "SYS", "X", "PIX"])
        self.assertIn("Legend", gpupool("topo", sim="pcie-4gpu").stdout)

    def test_legacy_driver_still_gives_links(self):
        topo = gpupool_json("topo", "--json", sim=os.path.join(TEST_FIXTURES, "old-driver.json"))
        self.assertEqual(len(topo["matrix"]), 2)


class ErrorsTest(unittest.TestCase):
    def run_plain(self, args, **env):
        return subprocess.run([GPUPOOL, *args], env=clean_env(**env), capture_output=True, text=True)

    def test_no_driver_is_one_clear_line_and_nonzero(self):
        proc = self.run_plain(["list"], GPUPOOL_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1)
        self.assertIn("NVIDIA driver not found", proc.stderr)
        self.assertEqual(proc.stdout, "")

    def test_unknown_simulated_machine(self):
        proc = self.run_plain(["list"], GPUPOOL_SIM="no-such-machine")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1)
        self.assertIn("no-such-machine", proc.stderr)
        self.assertIn("hgx-h200", proc.stderr)

    def test_bad_fixture_is_one_line(self):
        bad = [f for f in os.listdir(TEST_FIXTURES) if f.startswith("bad-")]
        self.assertTrue(bad)
        for name in bad:
            with self.subTest(fixture=name):
                proc = self.run_plain(["topo"], GPUPOOL_SIM=os.path.join(TEST_FIXTURES, name))
                self.assertEqual(proc.returncode, 1)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)

    def test_usage_errors_exit_2(self):
        proc = self.run_plain(["frobnicate"], GPUPOOL_SIM="hgx-h200")
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1)

    def test_version_and_help(self):
        self.assertRegex(self.run_plain(["--version"]).stdout, r"^gpupool \d+\.\d+\.\d+")
        for command in ("list", "topo", "resolve"):
            with self.subTest(command=command):
                proc = self.run_plain([command, "--help"])
                self.assertEqual(proc.returncode, 0)
                self.assertIn("--json", proc.stdout)


if __name__ == "__main__":
    main()
