"""gpupool inside a real Slurm allocation: `gpupool slurm start` serves exactly the job's GPUs,
many small jobs are packed into them and drained with `gpupool wait --all`, the daemon ends with
the job's shell, and a job without GPUs is told so. The node is a simulated HGX H200 whose device
files are numbered unlike nvidia-smi (hgx-h200-renumbered), so reading Slurm's numbers as
nvidia-smi indices would pick the wrong cards."""
import json
import os
import shlex
import shutil
import tempfile
import textwrap
import unittest

from harness import (BIN_DIR, DAEMON_CONFIG, TEST_FIXTURES, job_record_script, main, overlaps, process_gone,
                     read_records, until_exists, wait_until)
from slurm_cluster import SlurmCluster, require_slurm

FIXTURE = os.path.join(TEST_FIXTURES, "hgx-h200-renumbered.json")


def read(path):
    with open(path) as f:
        return f.read()


def uuids_of_device_numbers(numbers):
    """The UUIDs of the GPUs behind /dev/nvidiaN for each N, from the fixture."""
    gpus = json.loads(read(FIXTURE))["gpus"]
    by_minor = {gpu["minor_number"]: gpu["uuid"] for gpu in gpus}
    return {by_minor[int(n)] for n in numbers}


class SlurmAllocationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_slurm()
        cls.slurm = SlurmCluster(sim=FIXTURE).__enter__()
        cls.work = tempfile.mkdtemp(prefix="work-", dir=cls.slurm.path("jobs"))
        os.chmod(cls.work, 0o755)
        config = os.path.join(cls.work, "gpupool.toml")
        with open(config, "w") as f:
            f.write(DAEMON_CONFIG)
        cls.env = cls.slurm.env(GPUPOOL_SIM=FIXTURE, GPUPOOL_CONFIG=config)
        cls.env["PATH"] = os.path.abspath(BIN_DIR) + ":" + cls.env["PATH"]
        cls.jobs = []

    @classmethod
    def tearDownClass(cls):
        cls.slurm.stop()
        for job in cls.jobs:  # each job's private directory, which outlives it as /tmp does
            shutil.rmtree(f"/tmp/gpupool-{job}", ignore_errors=True)

    def batch(self, name, body, *sbatch_args):
        """Submits `body` as a bash batch script; returns (job id, its output file)."""
        script = os.path.join(self.work, f"{name}.sh")
        with open(script, "w") as f:
            f.write("#!/bin/bash\nset -e\ncd " + self.work + "\n" + textwrap.dedent(body))
        output = os.path.join(self.work, f"{name}.out")
        job = self.slurm.sbatch(f"--output={output}", f"--job-name={name}", *sbatch_args, script, env=self.env)
        self.jobs.append(job)
        return job, output

    def finished(self, job, output, timeout=120):
        fields = self.slurm.wait_job(job, timeout=timeout)
        text = read(output) if os.path.exists(output) else ""
        return fields, text

    def test_packs_many_jobs_into_the_allocated_gpus_and_drains(self):
        records = os.path.join(self.work, "pack.records")
        # The jobs that start first hold their GPUs until every job is queued: some run at once
        # however slowly the submissions come (an ASan build's take a second each).
        go = os.path.join(self.work, "pack.go")
        record = job_record_script(records, body=f"{until_exists(go)}; sleep 0.1", gpus="$CUDA_VISIBLE_DEVICES")
        job, output = self.batch("pack", f"""
            echo "slurm gpus: $SLURM_JOB_GPUS"
            gpupool slurm start
            gpupool slurm status
            for i in $(seq 1 24); do gpupool submit -g 1 --name one$i -- sh -c {shlex.quote(record)} >/dev/null; done
            for i in 1 2 3; do gpupool submit -g 2 --name two$i -- sh -c {shlex.quote(record)} >/dev/null; done
            touch {go}
            gpupool wait --all
            gpupool jobs --all --json > pack.json
            gpupool slurm stop
            """, "--gres=gpu:4")
        fields, text = self.finished(job, output)
        self.assertEqual(fields["JobState"], "COMPLETED", text + self.slurm.logs())
        slurm_numbers = next(l for l in text.splitlines() if l.startswith("slurm gpus:")).split(":")[1].strip()
        allocated = uuids_of_device_numbers(slurm_numbers.split(","))
        self.assertEqual(len(allocated), 4)
        self.assertIn("Slurm job", text)
        jobs = json.loads(read(os.path.join(self.work, "pack.json")))
        self.assertEqual(len(jobs), 27)
        self.assertTrue(all(j["state"] == "done" for j in jobs), jobs)
        runs = read_records(records)
        self.assertEqual(len(runs), 27)
        used = {uuid for _, _, gpus in runs.values() for uuid in gpus}
        # Exactly the allocation's cards, named by UUID, never another job's.
        self.assertTrue(used <= allocated, (used, allocated, slurm_numbers))
        clashes, most = overlaps(runs)
        self.assertEqual(clashes, [])
        self.assertLessEqual(most, 4)
        self.assertGreater(most, 1)  # packed, not one after another
        self.assertFalse(os.path.exists(f"/tmp/gpupool-{job}/run/gpupoold.sock"))

    def test_two_allocations_have_their_own_daemons_and_gpus(self):
        jobs = []
        for name in ("left", "right"):
            records = os.path.join(self.work, f"{name}.records")
            record = job_record_script(records, body="sleep 0.3", gpus="$CUDA_VISIBLE_DEVICES")
            jobs.append((name, records) + self.batch(name, f"""
                gpupool slurm start >/dev/null
                for i in $(seq 1 6); do gpupool submit -g 1 -- sh -c {shlex.quote(record)} >/dev/null; done
                gpupool wait --all
                echo "slurm gpus: $SLURM_JOB_GPUS"
                """, "--gres=gpu:3"))
        seen = []
        for name, records, job, output in jobs:
            fields, text = self.finished(job, output)
            self.assertEqual(fields["JobState"], "COMPLETED", text)
            numbers = next(l for l in text.splitlines() if l.startswith("slurm gpus:")).split(":")[1].strip()
            used = {uuid for _, _, gpus in read_records(records).values() for uuid in gpus}
            self.assertTrue(used <= uuids_of_device_numbers(numbers.split(",")), (name, used, numbers))
            seen.append(used)
        self.assertFalse(seen[0] & seen[1])

    def test_the_daemon_ends_with_the_jobs_shell_and_cancels_its_jobs(self):
        pid_file = os.path.join(self.work, "long.pid")
        job, output = self.batch("ends", f"""
            gpupool slurm start
            gpupool submit -- sh -c 'echo $$ > {pid_file}; exec sleep 300' >/dev/null
            while [ ! -s {pid_file} ]; do sleep 0.05; done
            gpupool slurm status | tail -1
            """, "--gres=gpu:1")
        fields, text = self.finished(job, output)
        self.assertEqual(fields["JobState"], "COMPLETED", text)
        self.assertIn("1 running", text)
        long_job = int(read(pid_file))
        wait_until(lambda: process_gone(long_job), timeout=30, what="the packed job to be cancelled")
        log = f"/tmp/gpupool-{job}/gpupoold.log"
        wait_until(lambda: "stopped" in read(log), timeout=30, what="gpupoold to stop")
        self.assertIn("has exited: cancelling every job and stopping", read(log))

    def test_run_inside_an_allocation_leases_from_its_gpus(self):
        job, output = self.batch("run", """
            echo "slurm gpus: $SLURM_JOB_GPUS"
            gpupool run -g 2 -- sh -c 'echo "visible: $CUDA_VISIBLE_DEVICES"'
            timeout 20 gpupool run -g 3 -- true 2>&1 || echo "three: refused"
            """, "--gres=gpu:2")
        fields, text = self.finished(job, output)
        self.assertEqual(fields["JobState"], "COMPLETED", text)
        numbers = next(l for l in text.splitlines() if l.startswith("slurm gpus:")).split(":")[1].strip()
        visible = next(l for l in text.splitlines() if l.startswith("visible:")).split(":", 1)[1].strip()
        self.assertEqual(set(visible.split(",")), uuids_of_device_numbers(numbers.split(",")))
        self.assertIn("three: refused", text)

    def test_a_job_without_gpus_is_told_in_one_line(self):
        job, output = self.batch("cpu", """
            gpupool slurm start 2>&1 && echo "started" || echo "exit $?"
            """)
        fields, text = self.finished(job, output)
        self.assertEqual(fields["JobState"], "COMPLETED", text)
        lines = text.strip().splitlines()
        self.assertEqual(lines[-1], "exit 1", text)
        self.assertRegex(lines[0], r"^gpupool: Slurm job \d+ has no GPUs \(SLURM_JOB_GPUS is not set\): "
                                   r"ask for them with --gres=gpu:N or --gpus=N$")

    def test_outside_an_allocation_the_commands_say_so(self):
        from harness import gpupool
        proc = gpupool("slurm", "start", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr, "gpupool: not inside a Slurm job (SLURM_JOB_ID is not set)\n")


if __name__ == "__main__":
    main()
