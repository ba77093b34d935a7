"""gpupool resolve, map and docker-args on simulated machines: the numbering of GPUs, end to end."""
import ctypes
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from collections import Counter

from harness import GPUPOOL, clean_env, gpupool, gpupool_json, main


def cuda_driver_installed():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def one_line_error(test, proc):
    test.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
    test.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
    test.assertTrue(proc.stderr.startswith("gpupool: "), proc.stderr)


class ResolveTest(unittest.TestCase):
    def test_json_contract(self):
        out = gpupool_json("resolve", "--json", "--", "1,0", sim="pcie-4gpu")
        for key in ("devices", "error", "warnings"):
            self.assertIn(key, out)
        gpus = gpupool_json("list", "--json", sim="pcie-4gpu")
        self.assertEqual([d["cuda_index"] for d in out["devices"]], [0, 1])
        self.assertEqual([d["index"] for d in out["devices"]], [1, 0])
        for device in out["devices"]:
            self.assertEqual(set(device), {"cuda_index", "index", "uuid", "pci_bus_id", "name", "mig_device"})
            host = gpus[device["index"]]
            self.assertEqual((device["uuid"], device["pci_bus_id"], device["name"]),
                             (host["uuid"], host["pci_bus_id"], host["name"]))
        self.assertIsNone(out["error"])
        self.assertEqual(out["warnings"], [])

    def test_unset_shows_every_gpu_and_empty_hides_them(self):
        unset = gpupool_json("resolve", "--json", sim="pcie-4gpu")
        self.assertIsNone(unset["cuda_visible_devices"])
        self.assertEqual(len(unset["devices"]), 4)
        empty = gpupool_json("resolve", "--json", "--", "", sim="pcie-4gpu")
        self.assertEqual(empty["cuda_visible_devices"], "")
        self.assertEqual(empty["devices"], [])
        self.assertIsNone(empty["error"])
        self.assertTrue(any("set but lists nothing" in w for w in empty["warnings"]))
        from_env = gpupool_json("resolve", "--json", sim="pcie-4gpu", env={"CUDA_VISIBLE_DEVICES": ""})
        self.assertEqual(from_env["devices"], [])
        self.assertIn("No GPU is visible", gpupool("resolve", "--", "", sim="pcie-4gpu").stdout)

    def test_a_gpu_listed_twice_fails_with_exit_1(self):
        proc = gpupool("resolve", "--json", "--", "1,2,1", sim="pcie-4gpu", check=False)
        self.assertEqual(proc.returncode, 1)
        out = json.loads(proc.stdout)
        self.assertTrue(out["error"].startswith("CUDA_ERROR_INVALID_DEVICE"))
        self.assertEqual(out["devices"], [])
        text = gpupool("resolve", "--", "1,2,1", sim="pcie-4gpu", check=False)
        self.assertEqual(text.returncode, 1)
        self.assertIn("CUDA initialisation fails", text.stdout)

    def test_fastest_first_reorders_a_mixed_machine_and_warns(self):
        out = gpupool_json("resolve", "--json", sim="mixed-workstation")
        self.assertEqual([d["index"] for d in out["devices"]], [1, 0])
        self.assertTrue(any("fastest first" in w for w in out["warnings"]))
        picked = gpupool_json("resolve", "--json", "--", "0", sim="mixed-workstation")
        self.assertEqual([d["index"] for d in picked["devices"]], [1])
        self.assertTrue(any("nvidia-smi's GPU 1" in w for w in picked["warnings"]))

    def test_order_pci_makes_the_numbers_agree(self):
        out = gpupool_json("resolve", "--json", "--order", "pci", "--", "0", sim="mixed-workstation")
        self.assertEqual(out["cuda_device_order"], "PCI_BUS_ID")
        self.assertEqual([d["index"] for d in out["devices"]], [0])
        self.assertEqual(out["warnings"], [])
        self.assertEqual(gpupool("resolve", "--order", "bogus", sim="h200-1", check=False).returncode, 2)

    def test_invalid_device_order_from_the_environment_fails(self):
        proc = gpupool("resolve", "--json", sim="h200-1", check=False,
                       env={"CUDA_DEVICE_ORDER": "pci_bus_id"})
        self.assertEqual(proc.returncode, 1)
        self.assertIsNotNone(json.loads(proc.stdout)["error"])

    @unittest.skipIf(cuda_driver_installed(), "a CUDA driver is installed here")
    def test_asking_the_driver_where_there_is_none_is_one_line(self):
        # The probe must be found and run (lib/gpupool) for its "no driver" answer to come back.
        proc = gpupool("resolve", "--driver", "--", "1,0", sim="hgx-h200", check=False)
        one_line_error(self, proc)
        self.assertRegex(proc.stderr, r"^gpupool: cannot ask the CUDA driver: no_driver \(libcuda\.so\.1: ")


class FakeRoot:
    """A host root directory (GPUPOOL_HOST_ROOT) with just the files container detection reads."""

    def __init__(self, test):
        self.path = tempfile.mkdtemp(prefix="gpupool-e2e-root-")
        test.addCleanup(shutil.rmtree, self.path)
        os.makedirs(os.path.join(self.path, "proc", "1"))
        self.write("proc/1/cgroup", "0::/init.scope\n")
        self.write("proc/1/environ", "PATH=/bin\0HOME=/\0")

    def write(self, relative, text):
        with open(os.path.join(self.path, relative), "w") as f:
            f.write(text)


class MapTest(unittest.TestCase):
    GPU_FIELDS = {"host_index", "container_index", "minor_number", "pci_bus_id", "uuid", "name",
                  "cuda_index", "cuda_mig_device"}

    def map_json(self, root, sim="pcie-4gpu", env=None, args=()):
        return gpupool_json("map", "--json", *args, sim=sim,
                            env={"GPUPOOL_HOST_ROOT": root.path, **(env or {})})

    def test_outside_a_container_every_layer_lines_up(self):
        root = FakeRoot(self)
        out = self.map_json(root, env={"CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self.assertEqual(out["container"], {"detected": False, "how": None})
        self.assertEqual((out["cuda_visible_devices"], out["cuda_device_order"]), ("2,0", "PCI_BUS_ID"))
        self.assertIsNone(out["nvidia_visible_devices"])
        self.assertIsNone(out["error"])
        self.assertEqual(out["warnings"], [])
        gpus = gpupool_json("list", "--json", sim="pcie-4gpu")
        self.assertEqual(len(out["gpus"]), 4)
        for row, gpu in zip(out["gpus"], gpus):
            self.assertEqual(set(row), self.GPU_FIELDS)
            self.assertEqual(row["host_index"], gpu["index"])
            self.assertEqual(row["container_index"], gpu["index"])
            self.assertEqual(row["minor_number"], gpu["minor_number"])
            self.assertEqual((row["uuid"], row["pci_bus_id"]), (gpu["uuid"], gpu["pci_bus_id"]))
        self.assertEqual([r["cuda_index"] for r in out["gpus"]], [1, None, 0, None])

    def test_resolver_error_and_warnings_are_carried(self):
        root = FakeRoot(self)
        proc = gpupool("map", "--json", sim="mixed-workstation", check=False,
                       env={"GPUPOOL_HOST_ROOT": root.path, "CUDA_VISIBLE_DEVICES": "0,0"})
        self.assertEqual(proc.returncode, 1)
        out = json.loads(proc.stdout)
        self.assertTrue(out["error"].startswith("CUDA_ERROR_INVALID_DEVICE"))
        self.assertEqual([r["cuda_index"] for r in out["gpus"]], [None, None])
        fastest = self.map_json(root, sim="mixed-workstation")
        self.assertEqual([r["cuda_index"] for r in fastest["gpus"]], [1, 0])
        self.assertTrue(any("fastest first" in w for w in fastest["warnings"]))

    def test_each_way_of_detecting_a_container(self):
        cases = {
            ".dockerenv": "/.dockerenv",
            "run/.containerenv": "/run/.containerenv",
            "proc/1/environ": "container=podman",
            "proc/1/cgroup": "kubepods",
        }
        for marker, how in cases.items():
            with self.subTest(marker=marker):
                root = FakeRoot(self)
                os.makedirs(os.path.join(root.path, "run"), exist_ok=True)
                contents = {"proc/1/environ": "PATH=/bin\0container=podman\0",
                            "proc/1/cgroup": "11:pids:/kubepods/burstable/pod7/0123\n"}
                root.write(marker, contents.get(marker, ""))
                out = self.map_json(root)
                self.assertTrue(out["container"]["detected"])
                self.assertIn(how, out["container"]["how"])

    def test_in_a_container_without_inventory_the_host_index_is_unknown(self):
        root = FakeRoot(self)
        root.write(".dockerenv", "")
        out = self.map_json(root, env={"NVIDIA_VISIBLE_DEVICES": "GPU-aaa,3"})
        self.assertEqual(out["nvidia_visible_devices"], "GPU-aaa,3")
        self.assertEqual([r["host_index"] for r in out["gpus"]], [None] * 4)
        self.assertEqual([r["container_index"] for r in out["gpus"]], [0, 1, 2, 3])
        self.assertTrue(any("GPUPOOL_HOST_INVENTORY" in w for w in out["warnings"]))
        text = gpupool("map", sim="pcie-4gpu", env={"GPUPOOL_HOST_ROOT": root.path}).stdout
        self.assertIn("n/a", text)
        self.assertIn("Container: yes", text)

    def test_in_a_container_the_host_inventory_is_matched_by_uuid(self):
        root = FakeRoot(self)
        root.write(".dockerenv", "")
        # The host has the same GPUs under other indices, plus one this container does not see.
        gpus = gpupool_json("list", "--json", sim="pcie-4gpu")
        host = [dict(g, index=10 + i) for i, g in enumerate(reversed(gpus))]
        host.append(dict(gpus[0], index=99, uuid="GPU-00000000-0000-0000-0000-000000000000"))
        inventory = os.path.join(root.path, "host-inventory.json")
        root.write("host-inventory.json", json.dumps(host))
        out = self.map_json(root, env={"GPUPOOL_HOST_INVENTORY": inventory})
        self.assertEqual([r["host_index"] for r in out["gpus"]], [13, 12, 11, 10])
        self.assertFalse(any("GPUPOOL_HOST_INVENTORY" in w for w in out["warnings"]))

        other = self.map_json(root, sim="h200-1", env={"GPUPOOL_HOST_INVENTORY": inventory})
        self.assertEqual(other["gpus"][0]["host_index"], None)
        self.assertTrue(any("not in the host inventory" in w for w in other["warnings"]))

        root.write("host-inventory.json", "not json")
        broken = self.map_json(root, env={"GPUPOOL_HOST_INVENTORY": inventory})
        self.assertTrue(any("is not a host inventory" in w for w in broken["warnings"]))
        missing = self.map_json(root, env={"GPUPOOL_HOST_INVENTORY": inventory + ".gone"})
        self.assertTrue(any("cannot be read" in w for w in missing["warnings"]))

    def test_pid_reads_a_running_process_environment(self):
        gpus = gpupool_json("list", "--json", sim="pcie-4gpu")
        value = f"{gpus[3]['uuid']},{gpus[1]['uuid']}"  # one kind only: a mixed list stops early
        child = subprocess.Popen(["sleep", "60"], env=clean_env(CUDA_VISIBLE_DEVICES=value,
                                                                CUDA_DEVICE_ORDER="PCI_BUS_ID",
                                                                NVIDIA_VISIBLE_DEVICES="all"))
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        out = gpupool_json("map", "--json", "--pid", str(child.pid), sim="pcie-4gpu",
                           env={"CUDA_VISIBLE_DEVICES": "0"})  # ours must not be used
        self.assertEqual(out["cuda_visible_devices"], value)
        self.assertEqual(out["cuda_device_order"], "PCI_BUS_ID")
        self.assertEqual(out["nvidia_visible_devices"], "all")
        self.assertEqual([r["cuda_index"] for r in out["gpus"]], [None, 1, None, 0])
        text = gpupool("map", "--pid", str(child.pid), sim="pcie-4gpu").stdout
        self.assertIn(f"process {child.pid}", text)
        self.assertIn("cuda:0", text)

    def test_pid_of_no_process_is_one_line(self):
        one_line_error(self, gpupool("map", "--pid", "999999999", sim="pcie-4gpu", check=False))


class DockerArgsTest(unittest.TestCase):
    def setUp(self):
        self.gpus = gpupool_json("list", "--json", sim="hgx-h200")
        self.uuids = [g["uuid"] for g in self.gpus]

    def test_docker_argument_uses_full_uuids_in_the_order_given(self):
        prefix = self.uuids[0][:12]
        out = gpupool("docker-args", "3", prefix, sim="hgx-h200").stdout
        self.assertIn(f"--gpus '\"device={self.uuids[3]},{self.uuids[0]}\"'", out)
        self.assertIn("driver: nvidia", out)
        self.assertIn("capabilities: [gpu]", out)
        self.assertIn("NVIDIA_VISIBLE_DEVICES", out)

    def test_a_comma_list_names_gpus_as_run_gpus_does(self):
        listed = gpupool_json("docker-args", "--json", "5,1", sim="hgx-h200")
        self.assertEqual(listed["uuids"], [self.uuids[5], self.uuids[1]])
        mixed = gpupool_json("docker-args", "--json", "2,3", "4", sim="hgx-h200")
        self.assertEqual(mixed["uuids"], self.uuids[2:5])

    def test_json(self):
        out = gpupool_json("docker-args", "--json", "5", "1", sim="hgx-h200")
        wanted = [self.uuids[5], self.uuids[1]]
        self.assertEqual(out["uuids"], wanted)
        self.assertEqual(out["docker"], f"--gpus '\"device={','.join(wanted)}\"'")
        (device,) = out["compose"]["deploy"]["resources"]["reservations"]["devices"]
        self.assertEqual(device, {"driver": "nvidia", "device_ids": wanted, "capabilities": ["gpu"]})
        self.assertEqual(out["env"], {"NVIDIA_VISIBLE_DEVICES": ",".join(wanted)})

    def test_format_docker_survives_command_substitution(self):
        out = gpupool("docker-args", "--format", "docker", "0", "7", sim="hgx-h200").stdout
        # $(...) splits on blanks and removes no quotes: docker must get the double quotes itself.
        words = subprocess.run(["sh", "-c", 'printf "%s\\n" $(cat)'], input=out, capture_output=True,
                               text=True, check=True).stdout.splitlines()
        self.assertEqual(words, ["--gpus", f'"device={self.uuids[0]},{self.uuids[7]}"'])

    def test_bad_gpu_names_are_one_clear_line(self):
        prefix_counts = Counter(u[:5] for u in self.uuids)
        ambiguous = next(p for p, n in prefix_counts.items() if n > 1)
        cases = {"8": "no GPU 8", "GPU-zzzz": "no GPU here has a UUID", ambiguous: "fits the UUIDs",
                 "fast": "neither a GPU index", "1,x": "neither a GPU index"}
        for name, message in cases.items():
            with self.subTest(name=name):
                proc = gpupool("docker-args", name, sim="hgx-h200", check=False)
                one_line_error(self, proc)
                self.assertIn(message, proc.stderr)
                self.assertEqual(proc.stdout, "")
        one_line_error(self, gpupool("docker-args", "1", self.uuids[1], sim="hgx-h200", check=False))
        self.assertEqual(gpupool("docker-args", sim="hgx-h200", check=False).returncode, 2)

    def test_help(self):
        for command in ("map", "docker-args"):
            with self.subTest(command=command):
                proc = subprocess.run([GPUPOOL, command, "--help"], env=clean_env(), capture_output=True,
                                      text=True)
                self.assertEqual(proc.returncode, 0)
                self.assertIn("--json", proc.stdout)


if __name__ == "__main__":
    main()
