"""scripts/device/verify's multigpu steps, the batched check of a real multi-GPU machine, as a dry
run on a simulated one: multi-GPU machines are lent rarely, so the script must be known to work before one
is. The dry run drives the same gpupool commands, scorer and daemon steps; only the checks that need
nvidia-smi, the CUDA driver or torch are left out."""
import os
import re
import subprocess
import tempfile
import unittest

from harness import BIN_DIR, SOURCE_DIR, clean_env, main

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "device", "verify")
# Without a real driver, nvidia-smi and torch, exactly these say SKIP.
DRIVER_ONLY = {"1a list/topo vs nvidia-smi", "2 resolver vs driver"}


def dry_run(fixture):
    """Runs the script on the simulated machine FIXTURE: (exit status, {check: (status, figures)}, log)."""
    with tempfile.TemporaryDirectory(prefix="verify-multigpu-") as out:
        proc = subprocess.run([SCRIPT, "--sim", fixture, "--budget", "240", os.path.dirname(BIN_DIR), out, "multigpu"],
                              env=clean_env(), capture_output=True, text=True, timeout=280)
        checks = {}
        with open(os.path.join(out, "summary.txt")) as f:
            for line in f:
                status, name, figures = re.fullmatch(r"(PASS|FAIL|SKIP) +([^:]+): (.*)\n", line).groups()
                checks[name] = (status, figures)
    return proc.returncode, checks, proc.stdout + proc.stderr


class DryRunTest(unittest.TestCase):
    def test_list_names_the_steps_and_the_groups(self):
        listed = subprocess.run([SCRIPT, "--list"], capture_output=True, text=True, timeout=30, check=True).stdout
        groups = dict(line.split(": ", 1) for line in listed.splitlines() if ": " in line)
        self.assertEqual(groups["multigpu"].split(), ["list", "fixture", "cvd", "placement", "scorer", "leases",
                                                      "allreduce", "daemon-load", "end"])
        self.assertEqual(set(groups["all"].split()) - set(groups["gpu"].split()) - set(groups["multigpu"].split()),
                         set(), "a step in no group but all")

    def test_every_check_passes_on_an_unevenly_linked_8_gpu_machine(self):
        # The DGX-1's hybrid cube-mesh has pairs with 2, 1 and no NVLinks, so the placement step
        # gets its symmetry-breaking cases and the all-reduce step a worse-connected set; the
        # fixture's own processes are set aside, since the real machine is expected to be idle.
        status, checks, log = dry_run("dgx1-v100")
        failed = {name: figures for name, (result, figures) in checks.items() if result == "FAIL"}
        self.assertEqual(failed, {}, log)
        self.assertEqual(status, 0, log)
        self.assertEqual({name for name, (result, _) in checks.items() if result == "SKIP"}, DRIVER_ONLY)
        for name in ["1b fixture capture", "3 placement -g 2", "3 placement -g 4", "3 placement -g 8",
                     "3 scorer self-test", "4 leases", "5a all-reduce on all 8 GPUs",
                     "5b all-reduce, best vs worse set", "6a daemon dispatch",
                     "6b daemon /metrics under load", "end"]:
            self.assertIn(name, checks)
        self.assertIn("reproduces the 8-GPU matrix", checks["1b fixture capture"][1])
        self.assertIn("asymmetric", checks["3 placement -g 2"][1])
        self.assertIn("0 overlaps", checks["4 leases"][1])
        self.assertRegex(checks["5b all-reduce, best vs worse set"][1],
                         r"gpupool chose \{[0-9,]+\} \(optimal.*worse set \{[0-9,]+\} \(worst pair SYS\)")
        self.assertIn("states {'done': 504}", checks["6a daemon dispatch"][1])
        self.assertIn("for 8/8 GPUs", checks["6b daemon /metrics under load"][1])
        self.assertEqual(checks["end"], ("PASS", "no lease left: gpupool leases --json is []"))

    def test_steps_that_need_more_gpus_than_there_are_say_skip(self):
        status, checks, log = dry_run("mixed-workstation")
        self.assertEqual(status, 0, log)
        self.assertEqual(checks["3 placement -g 4"], ("SKIP", "needs 4 GPUs, this machine has 2"))
        self.assertEqual(checks["3 placement -g 8"], ("SKIP", "needs 8 GPUs, this machine has 2"))
        self.assertEqual(checks["5b all-reduce, best vs worse set"], ("SKIP", "needs 3 or more GPUs"))
        self.assertEqual(checks["3 placement -g 2"][0], "PASS")
        self.assertEqual(checks["6a daemon dispatch"][0], "PASS")


if __name__ == "__main__":
    main()
