"""MIG devices through the simulated NVML: list, topo, map, resolve and docker-args (docs/mig.md)."""
import json
import unittest

from harness import gpupool, gpupool_json, main
from test_resolve_map import FakeRoot


def mig_devices(fixture):
    return {gpu["index"]: gpu["mig_devices"] for gpu in gpupool_json("list", "--json", sim=fixture)}


class ListTest(unittest.TestCase):
    def test_h200_machine_lists_gpu_0_as_two_mig_devices(self):
        devices = mig_devices("hgx-h200-mig")
        self.assertEqual([d["profile"] for d in devices[0]], ["4g.71gb", "3g.71gb"])
        self.assertEqual([(d["gpu_instance_id"], d["compute_instance_id"]) for d in devices[0]], [(1, 0), (2, 0)])
        self.assertEqual([d["multiprocessors"] for d in devices[0]], [64, 60])
        for d in devices[0]:
            self.assertRegex(d["uuid"], r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-")
        self.assertEqual([devices[i] for i in range(1, 8)], [[]] * 7)

    def test_a100_machine_has_seven_1g_devices_per_gpu(self):
        for index, devices in mig_devices("dgx-a100-mig").items():
            with self.subTest(gpu=index):
                self.assertEqual([d["profile"] for d in devices], ["1g.10gb"] * 7)
                self.assertEqual([d["index"] for d in devices], list(range(7)))
                self.assertEqual([d["gpu_instance_id"] for d in devices], list(range(7, 14)))

    def test_compute_instances_of_one_gpu_instance_are_named_with_their_share(self):
        devices = mig_devices("a100-mig-mixed")
        self.assertEqual([d["profile"] for d in devices[0]], ["1c.3g.40gb", "2c.3g.40gb", "2g.20gb", "1g.10gb"])
        self.assertEqual(devices[1], [])

    def test_the_table_shows_each_mig_device_under_its_gpu(self):
        out = gpupool("list", sim="a100-mig-mixed").stdout
        lines = out.splitlines()
        gpu0 = next(i for i, line in enumerate(lines) if line.lstrip().startswith("0 "))
        self.assertRegex(lines[gpu0 + 1], r"^  0:0 +1c\.3g\.40gb +GI 1 CI 0 +40192 MiB MIG-")
        self.assertRegex(lines[gpu0 + 4], r"^  0:3 +1g\.10gb +GI 13 CI 0 +9728 MiB MIG-")
        self.assertIn("    MIG mode, no MIG devices", lines)

    def test_a_machine_without_mig_lists_no_mig_devices(self):
        self.assertEqual(mig_devices("hgx-h200"), {i: [] for i in range(8)})
        self.assertNotIn("MIG", gpupool("list", sim="hgx-h200").stdout)


class ResolveTest(unittest.TestCase):
    def resolve(self, value, fixture="hgx-h200-mig", check=True):
        proc = gpupool("resolve", "--json", "--", value, sim=fixture, check=check)
        return json.loads(proc.stdout)

    def test_a_mig_uuid_selects_that_mig_device(self):
        mig = mig_devices("hgx-h200-mig")[0][1]
        out = self.resolve(mig["uuid"])
        (device,) = out["devices"]
        self.assertEqual(device["cuda_index"], 0)
        self.assertEqual(device["index"], 0)
        self.assertEqual(device["mig_device"]["uuid"], mig["uuid"])
        self.assertEqual(device["mig_device"]["profile"], "3g.71gb")
        self.assertEqual(out["warnings"], [])
        text = gpupool("resolve", "--", mig["uuid"], sim="hgx-h200-mig").stdout
        self.assertIn(f"cuda:0 = MIG device 0:1  3g.71gb  {mig['uuid']} of GPU 0", text)

    def test_cuda_sees_only_the_first_of_several_mig_devices(self):
        first, second = mig_devices("hgx-h200-mig")[0]
        whole = gpupool_json("list", "--json", sim="hgx-h200-mig")[3]["uuid"]
        out = self.resolve(f"{second['uuid']},{first['uuid']},{whole}")
        self.assertEqual([d["mig_device"]["uuid"] for d in out["devices"]], [second["uuid"]])
        self.assertTrue(any("only one MIG device" in w and "GPU 3" in w for w in out["warnings"]), out["warnings"])

    def test_a_mig_device_listed_twice_fails(self):
        mig = mig_devices("hgx-h200-mig")[0][0]
        proc = gpupool("resolve", "--json", "--", f"{mig['uuid']},{mig['uuid']}", sim="hgx-h200-mig", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(json.loads(proc.stdout)["devices"], [])

    def test_the_pre_r470_name_is_rejected_and_the_mig_uuid_suggested(self):
        gpu = gpupool_json("list", "--json", sim="hgx-h200-mig")[0]
        mig = gpu["mig_devices"][1]
        out = self.resolve(f"MIG-{gpu['uuid']}/{mig['gpu_instance_id']}/{mig['compute_instance_id']}")
        self.assertEqual(out["devices"], [])
        self.assertIn(f"write {mig['uuid']}", out["entries"][0]["explanation"])

    def test_a_whole_gpu_in_mig_mode_is_still_flagged(self):
        out = self.resolve("0")
        self.assertTrue(any("GPU 0 has MIG enabled" in w for w in out["warnings"]), out["warnings"])


class TopoMapTest(unittest.TestCase):
    def test_topo_names_the_mig_devices_of_each_gpu(self):
        topo = gpupool_json("topo", "--json", sim="hgx-h200-mig")
        uuids = [d["uuid"] for d in mig_devices("hgx-h200-mig")[0]]
        self.assertEqual(topo["gpus"][0]["mig_devices"], uuids)
        self.assertEqual(topo["gpus"][1]["mig_devices"], [])
        text = gpupool("topo", sim="hgx-h200-mig").stdout
        self.assertIn("GPU0 is in MIG mode as 4g.71gb + 3g.71gb", text)

    def test_map_marks_the_gpu_whose_mig_device_cuda_sees(self):
        mig = mig_devices("hgx-h200-mig")[0][1]
        env = {"CUDA_VISIBLE_DEVICES": mig["uuid"], "GPUPOOL_HOST_ROOT": FakeRoot(self).path}
        out = gpupool_json("map", "--json", sim="hgx-h200-mig", env=env)
        self.assertEqual(out["gpus"][0]["cuda_index"], 0)
        self.assertEqual(out["gpus"][0]["cuda_mig_device"]["uuid"], mig["uuid"])
        self.assertEqual([g["cuda_index"] for g in out["gpus"][1:]], [None] * 7)
        text = gpupool("map", sim="hgx-h200-mig", env=env).stdout
        self.assertIn(f"cuda:0 is MIG device 0:1 of GPU 0: 3g.71gb, {mig['uuid']}", text)


class DockerArgsTest(unittest.TestCase):
    def test_mig_devices_by_uuid_prefix_and_by_gpu_colon_device(self):
        first, second = mig_devices("hgx-h200-mig")[0]
        out = gpupool_json("docker-args", "--json", first["uuid"][:12], "0:1", "3", sim="hgx-h200-mig")
        whole = gpupool_json("list", "--json", sim="hgx-h200-mig")[3]["uuid"]
        self.assertEqual(out["uuids"], [first["uuid"], second["uuid"], whole])
        self.assertEqual(out["env"]["NVIDIA_VISIBLE_DEVICES"], f"{first['uuid']},{second['uuid']},{whole}")

    def test_bad_mig_names_are_one_line_errors(self):
        for args, message in ((["0:5"], "GPU 0 has no MIG device 5: its MIG devices are 0, 1"),
                              (["1:0"], "GPU 1 has no MIG devices"),
                              (["MIG-ffff"], "no MIG device here has a UUID starting with"),
                              (["0:0", "0:0"], "is named twice")):
            with self.subTest(args=args):
                proc = gpupool("docker-args", *args, sim="hgx-h200-mig", check=False)
                self.assertEqual(proc.returncode, 1)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
                self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    main()
