"""The steps of scripts/device/verify (stdlib only; the jobs some of them start use torch). Each
step is a function of a Context: it appends "PASS|FAIL|SKIP name: figures" lines to the summary
with result(), prints its details, and leaves the GPUs as it found them."""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/device
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
for directory in (HERE, os.path.join(SOURCE_DIR, "bench"), os.path.join(SOURCE_DIR, "tests", "e2e"),
                  os.path.join(SOURCE_DIR, "python")):
    sys.path.insert(0, directory)

import harness  # noqa: E402

# The fixture of the simulated machine in a dry run (scripts/device/verify --sim), else None.
DRY_RUN = os.environ.get("VERIFY_SIM") or None
# Programs that use torch run without the staged build's LD_LIBRARY_PATH, whose libraries are
# gpupool's only.
PLAIN = ["env", "-u", "LD_LIBRARY_PATH"]
# The jobs the steps start on the GPUs (multigpu-jobs.py says what each does).
JOB = [*PLAIN, sys.executable, os.path.join(HERE, "multigpu-jobs.py")]


class Context:
    """What a step is given: args (bin, out, summary, gpus, root, and the step's own options), the
    staged gpupool, and the summary to report to."""

    def __init__(self, args):
        self.args = args
        self.gpupool = os.path.join(args.bin, "gpupool")
        self.failed = False

    def result(self, status, name, figures):
        line = f"{status:<4} {name}: {figures}"
        print(line, flush=True)
        with open(self.args.summary, "a") as f:
            f.write(line + "\n")
        self.failed |= status == "FAIL"

    def check(self, name, ok, figures=""):
        self.result("PASS" if ok else "FAIL", name, figures)

    def cli(self, *args, env=None, timeout=120, quiet=False):
        proc = subprocess.run([self.gpupool, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              env=env or os.environ)
        if not quiet or proc.returncode != 0:
            print(f"$ gpupool {' '.join(map(str, args))}  -> exit {proc.returncode}\n{proc.stdout}{proc.stderr}",
                  flush=True)
        return proc

    def leases(self):
        proc = self.cli("leases", "--json", quiet=True)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def wait_for_leases(self, want, timeout=30):
        """Polls until the leased GPU indices are `want`; returns the last listing."""
        deadline = time.monotonic() + timeout
        while True:
            listed = self.leases() or []
            if sorted(lease["index"] for lease in listed) == sorted(want) or time.monotonic() > deadline:
                return listed
            time.sleep(0.2)

    def daemon(self, config, **options):
        """A gpupoold of this step's own (harness.Daemon) on this machine's GPUs, or the simulated
        machine in a dry run; its log is copied to OUT/gpupoold-STEP.log when it has stopped."""
        return StepDaemon(os.path.join(self.args.out, f"gpupoold-{self.args.step}.log"), sim=DRY_RUN,
                          bin_dir=self.args.bin, base_config=config, parent_dir=self.args.root, keep_root=True,
                          **options)


class StepDaemon(harness.Daemon):
    def __init__(self, log_copy, **options):
        super().__init__(**options)
        self.log_copy = log_copy

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            shutil.copy(self.log, self.log_copy)


def step_leases_left(s):
    leases = s.cli("leases", "--json").stdout.strip()
    listed = json.loads(leases or "null")
    s.result("PASS" if listed == [] else "FAIL", "end",
             "no lease left: gpupool leases --json is []" if listed == [] else f"leases left: {leases}")
