"""gpupool slurm gres-conf and node-conf on simulated machines: every line checked against what the
fixture says (device files, types, NVLinks, the cores near each GPU through a planted CPU topology),
-o writing the file, and bad command lines refused with one line."""
import json
import os
import socket
import subprocess
import tempfile
import unittest

from harness import GPUPOOL, SOURCE_DIR, TEST_FIXTURES, clean_env, gpupool, main

MACHINES = ["hgx-h200", "dgx1-v100", "pcie-4gpu", "mixed-workstation"]


def load_fixture(name):
    path = name if name.endswith(".json") else os.path.join(SOURCE_DIR, "fixtures", f"{name}.json")
    with open(path) as f:
        return json.load(f)


def cpu_list(text):
    cpus = []
    for item in text.split(","):
        first, _, last = item.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def ranges(numbers):
    """[0, 1, 2, 5] -> "0-2,5", as Slurm and the kernel write lists."""
    numbers, parts = sorted(numbers), []
    for n in numbers:
        if parts and parts[-1][1] == n - 1:
            parts[-1][1] = n
        else:
            parts.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def host_cores(fixture):
    """The host the test plants for a fixture: a socket per NUMA node; a node's CPUs written as two
    ranges of one length ("0-55,112-167") are cores of two threads, the k-th CPU of each range
    being siblings, and any other list one thread per core. Returns the cores (lists of CPUs) in
    Slurm's order: socket by socket, each by its lowest CPU."""
    sockets = []
    for node, text in fixture["numa_cpus"].items():
        parts = [cpu_list(part) for part in text.split(",")]
        if len(parts) == 2 and len(parts[0]) == len(parts[1]):
            cores = [list(pair) for pair in zip(*parts)]
        else:
            cores = [[cpu] for cpu in cpu_list(text)]
        sockets.append((int(node), sorted(cores)))
    sockets.sort(key=lambda socket_cores: socket_cores[1][0][0])
    return sockets


def plant_cpu_topology(root, fixture):
    for package, cores in host_cores(fixture):
        for core in cores:
            for cpu in core:
                topology = os.path.join(root, "sys/devices/system/cpu", f"cpu{cpu}", "topology")
                os.makedirs(topology)
                with open(os.path.join(topology, "physical_package_id"), "w") as f:
                    f.write(f"{package}\n")
                with open(os.path.join(topology, "thread_siblings_list"), "w") as f:
                    f.write(ranges(core) + "\n")


def minor_number(fixture, i):
    """The N of /dev/nvidiaN: the GPU's minor number, else (null: the driver does not say) its index."""
    minor = fixture["gpus"][i].get("minor_number", i)
    return i if minor is None else minor


def expected_lines(fixture, cores_known):
    """gres.conf's lines for a fixture, from the fixture alone (docs/fixtures.md: how links are derived)."""
    gpus = fixture["gpus"]
    order = sorted(range(len(gpus)), key=lambda i: minor_number(fixture, i))
    core_of_cpu = {}
    all_cores = [core for _, cores in host_cores(fixture) for core in cores]
    for index, core in enumerate(all_cores):
        for cpu in core:
            core_of_cpu[cpu] = index

    def nvlinks(i, j):
        peer = sum(p["links"] for p in gpus[i].get("nvlinks", []) if p["peer"] == j)
        fabric = min(gpus[i].get("nvswitch_links", 0), gpus[j].get("nvswitch_links", 0))
        return 0 if "fault" in gpus[i] or "fault" in gpus[j] else peer + fabric

    lines = []
    for i in order:
        gpu = gpus[i]
        words = ["Name=gpu", "Type=" + gpu["name"].lower().replace(" ", "_"),
                 f"File=/dev/nvidia{minor_number(fixture, i)}"]
        affinity = gpu.get("cpu_affinity", fixture["numa_cpus"][str(gpu["pcie"]["numa_node"])])
        cores = {core_of_cpu[cpu] for cpu in cpu_list(affinity)}
        if cores_known and "fault" not in gpu and len(cores) < len(all_cores):
            words.append("Cores=" + ranges(cores))
        words.append("Links=" + ",".join("-1" if j == i else str(nvlinks(i, j)) for j in order))
        lines.append(" ".join(words))
    return lines


def config_lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


class SlurmConfTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.TemporaryDirectory()
        self.addCleanup(self.root.cleanup)

    def planted(self, fixture):
        """An environment whose host root holds the fixture's CPU topology."""
        root = os.path.join(self.root.name, fixture["name"])
        if not os.path.isdir(root):
            plant_cpu_topology(root, fixture)
        return {"GPUPOOL_HOST_ROOT": root}

    def test_gres_conf_of_every_machine_is_what_its_fixture_says(self):
        for name in MACHINES:
            with self.subTest(machine=name):
                fixture = load_fixture(name)
                out = gpupool("slurm", "gres-conf", sim=name, env=self.planted(fixture)).stdout
                self.assertEqual(config_lines(out), expected_lines(fixture, cores_known=True))
                self.assertTrue(out.startswith(f"# gres.conf for the GPUs of the simulated machine {name}: "), out)
                self.assertIn(f"NVIDIA driver {fixture['driver']['driver_version']}.", out.splitlines()[0])
                self.assertEqual(out.count("\n# GPU "), len(fixture["gpus"]))

    def test_lines_follow_device_files_and_links_follow_the_lines(self):
        # dgx1-v100 with GPUs 0 and 1 on each other's device files and GPU 7's minor number unknown.
        overlay = {"0": {"minor_number": 1}, "1": {"minor_number": 0}, "7": {"minor_number": None}}
        state = os.path.join(self.root.name, "state.json")
        with open(state, "w") as f:
            json.dump({"gpus": overlay}, f)
        fixture = load_fixture("dgx1-v100")
        for index, keys in overlay.items():
            fixture["gpus"][int(index)].update(keys)
        proc = gpupool("slurm", "gres-conf", sim="dgx1-v100", env={"GPUPOOL_SIM_STATE": state})
        lines = config_lines(proc.stdout)
        self.assertEqual(lines, expected_lines(fixture, cores_known=False))
        self.assertTrue(lines[0].startswith("Name=gpu Type=tesla_v100-sxm2-32gb File=/dev/nvidia0 Links=-1,1,2,1,"),
                        lines[0])
        self.assertIn("#   the driver did not tell its minor number: nvidia7 is its NVML index", proc.stdout)
        (warning,) = proc.stderr.splitlines()
        self.assertIn("GPU 7 (00000000:8A:00.0): the driver did not tell its minor number", warning)

    def test_cores_are_core_indexes_not_cpu_numbers(self):
        # hgx-h200's second socket: CPUs 56-111 and their siblings 168-223 are cores 56-111.
        out = gpupool("slurm", "gres-conf", sim="hgx-h200", env=self.planted(load_fixture("hgx-h200"))).stdout
        self.assertEqual({line.split()[3] for line in config_lines(out)}, {"Cores=0-55", "Cores=56-111"})
        # One socket whose GPUs every core serves alike: no Cores= at all, and the comment says why.
        out = gpupool("slurm", "gres-conf", sim="mixed-workstation",
                      env=self.planted(load_fixture("mixed-workstation"))).stdout
        self.assertFalse([line for line in config_lines(out) if "Cores=" in line], out)
        self.assertIn("#   every core of the host is as near to it as any other, so Cores= is left out", out)

    def test_without_the_hosts_cpu_topology_cores_are_left_out(self):
        # A simulated machine's CPUs are not this host's: without GPUPOOL_HOST_ROOT none are known.
        out = gpupool("slurm", "gres-conf", sim="dgx1-v100").stdout
        self.assertEqual(config_lines(out), expected_lines(load_fixture("dgx1-v100"), cores_known=False))
        self.assertIn("# Cores= is left out: the host's CPU topology", out)
        empty_root = os.path.join(self.root.name, "empty")
        os.mkdir(empty_root)
        out = gpupool("slurm", "gres-conf", sim="dgx1-v100", env={"GPUPOOL_HOST_ROOT": empty_root}).stdout
        self.assertEqual(config_lines(out), expected_lines(load_fixture("dgx1-v100"), cores_known=False))

    def test_nvswitch_links_count_and_the_file_says_so(self):
        out = gpupool("slurm", "gres-conf", sim="hgx-h200").stdout
        self.assertIn("# NVLinks through the NVSwitch fabric count as direct.", out)
        self.assertNotIn("NVSwitch", gpupool("slurm", "gres-conf", sim="dgx1-v100").stdout)

    def test_type_and_device_dir_options(self):
        out = gpupool("slurm", "gres-conf", "--type", "h200", "--device-dir", "/run/gpu-devices",
                      sim="hgx-h200").stdout
        for n, line in enumerate(config_lines(out)):
            self.assertTrue(line.startswith(f"Name=gpu Type=h200 File=/run/gpu-devices/nvidia{n} "), line)

    def test_a_lost_gpu_keeps_its_line_with_a_warning(self):
        lost = os.path.join(TEST_FIXTURES, "lost-gpu.json")
        fixture = load_fixture(lost)
        proc = gpupool("slurm", "gres-conf", sim=lost, env=self.planted(fixture))
        self.assertEqual(config_lines(proc.stdout), expected_lines(fixture, cores_known=True))
        self.assertIn("#   fault: GPU is lost", proc.stdout)
        (warning,) = proc.stderr.splitlines()
        self.assertRegex(warning, r"^gpupool: warning: GPU 2 \(00000000:[0-9A-F]{2}:00\.0\) has a fault: GPU is lost")

    def test_output_file_holds_what_would_be_printed(self):
        env = self.planted(load_fixture("pcie-4gpu"))
        printed = gpupool("slurm", "gres-conf", sim="pcie-4gpu", env=env).stdout
        path = os.path.join(self.root.name, "gres.conf")
        proc = gpupool("slurm", "gres-conf", "-o", path, sim="pcie-4gpu", env=env)
        self.assertEqual((proc.stdout, proc.stderr), ("", ""))
        with open(path) as f:
            self.assertEqual(f.read(), printed)
        proc = gpupool("slurm", "gres-conf", "--output", os.path.join(self.root.name, "no", "dir", "gres.conf"),
                       sim="pcie-4gpu", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("cannot write", proc.stderr)

    def test_node_conf_names_the_node_its_gpus_and_cpu_layout(self):
        host = socket.gethostname().split(".")[0]
        fixture = load_fixture("hgx-h200")
        out = gpupool("slurm", "node-conf", sim="hgx-h200", env=self.planted(fixture)).stdout
        sockets = host_cores(fixture)
        cores_per_socket = len(sockets[0][1])
        threads = len(sockets[0][1][0])
        self.assertEqual(config_lines(out), [
            f"NodeName={host} Gres=gpu:nvidia_h200:8 CPUs={len(sockets) * cores_per_socket * threads} "
            f"Sockets={len(sockets)} CoresPerSocket={cores_per_socket} ThreadsPerCore={threads}"])
        self.assertIn("GresTypes=gpu", out)

        out = gpupool("slurm", "node-conf", "--name", "ws[1-3]", sim="mixed-workstation").stdout
        types = [gpu["name"].lower().replace(" ", "_") for gpu in load_fixture("mixed-workstation")["gpus"]]
        self.assertEqual(config_lines(out), [f"NodeName=ws[1-3] Gres=gpu:{types[0]}:1,gpu:{types[1]}:1"])
        out = gpupool("slurm", "node-conf", "--name", "ws1", "--type", "rtx", sim="mixed-workstation").stdout
        self.assertEqual(config_lines(out), ["NodeName=ws1 Gres=gpu:rtx:2"])

    def test_gres_conf_and_node_conf_agree(self):
        for name in MACHINES:
            with self.subTest(machine=name):
                lines = config_lines(gpupool("slurm", "gres-conf", sim=name).stdout)
                (node,) = config_lines(gpupool("slurm", "node-conf", "--name", "n1", sim=name).stdout)
                counts = {}
                for line in lines:
                    kind = line.split()[1].removeprefix("Type=")
                    counts[kind] = counts.get(kind, 0) + 1
                self.assertEqual(node, "NodeName=n1 Gres=" + ",".join(f"gpu:{t}:{c}" for t, c in counts.items()))

    def test_shards_are_each_gpus_memory_in_shards_of_the_given_size(self):
        fixture = load_fixture("hgx-h200")
        env = self.planted(fixture)
        out = gpupool("slurm", "gres-conf", "--shard-mib", "2048", sim="hgx-h200", env=env).stdout
        order = sorted(range(len(fixture["gpus"])), key=lambda i: minor_number(fixture, i))
        shards = {i: fixture["gpus"][i]["memory_total_mib"] // 2048 for i in order}
        expected = []
        for i, gpu_line in zip(order, expected_lines(fixture, cores_known=True)):
            expected += [gpu_line, f"Name=shard Count={shards[i]} File=/dev/nvidia{minor_number(fixture, i)}"]
        self.assertEqual(config_lines(out), expected)
        self.assertIn("one shard per 2048 MiB of its memory", out)
        self.assertIn("`gpupool submit --slurm --mem` counts in the same shards (--shard-mib 2048)", out)

        out = gpupool("slurm", "node-conf", "--name", "n1", "--shard-mib", "2048", sim="hgx-h200").stdout
        self.assertEqual(config_lines(out), [f"NodeName=n1 Gres=gpu:nvidia_h200:8,shard:{sum(shards.values())}"])
        self.assertIn("slurm.conf also needs GresTypes=gpu,shard;", out)

    def test_a_gpu_of_unknown_memory_has_no_shards_and_a_warning(self):
        lost = os.path.join(TEST_FIXTURES, "lost-gpu.json")  # GPU 2's memory is unknown
        fixture = load_fixture(lost)
        proc = gpupool("slurm", "gres-conf", "--shard-mib", "1024", sim=lost)
        shards = {i: fixture["gpus"][i]["memory_total_mib"] // 1024 for i in (0, 1, 3)}
        self.assertEqual([line for line in config_lines(proc.stdout) if line.startswith("Name=shard ")],
                         [f"Name=shard Count={n} File=/dev/nvidia{minor_number(fixture, i)}"
                          for i, n in shards.items()])
        self.assertIn("#   its memory is unknown, so it has no shards", proc.stdout)
        self.assertRegex(proc.stderr.splitlines()[-1],
                         r"^gpupool: warning: GPU 2 \(00000000:[0-9A-F]{2}:00\.0\): its memory is unknown; gres.conf "
                         r"gives it no shards$")
        out = gpupool("slurm", "node-conf", "--name", "n1", "--shard-mib", "1024", sim=lost).stdout
        self.assertIn("# GPU 2's memory is unknown: it has no shards.", out)
        (node,) = config_lines(out)
        self.assertTrue(node.endswith(f",shard:{sum(shards.values())}"), node)

    def test_a_wrong_command_line_gets_one_line_and_exit_2(self):
        for args in (["slurm"], ["slurm", "gres-conf", "--bogus"], ["slurm", "gres-conf", "--type", "a:b"],
                     ["slurm", "gres-conf", "--device-dir", "dev"], ["slurm", "node-conf", "--name", "a b"],
                     ["slurm", "node-conf", "--type", ""], ["slurm", "gres-conf", "--shard-mib", "0"],
                     ["slurm", "gres-conf", "--shard-mib", "1.5"], ["slurm", "node-conf", "--shard-mib", "-1024"],
                     ["slurm", "node-conf", "--shard-mib"]):
            with self.subTest(args=args):
                proc = subprocess.run([GPUPOOL, *args], env=clean_env(GPUPOOL_SIM="hgx-h200"),
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertEqual(proc.stdout, "")
                self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
                self.assertTrue(proc.stderr.startswith("gpupool: "), proc.stderr)


if __name__ == "__main__":
    main()
