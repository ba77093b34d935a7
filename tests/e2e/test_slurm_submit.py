"""gpupool submit --slurm and the queue commands on Slurm jobs, against a throwaway one-node Slurm
(tests/e2e/slurm_cluster.py, Debian's Slurm) of the simulated hgx-h200: the job's words,
directory, environment and GPUs; jobs, show, cancel, hold, release, wait and logs on slurm:ID;
dependencies, time limits, output files, the JSON shape, Slurm's errors passed on in one line,
gpupoold's jobs listed beside Slurm's, jobs Slurm has forgotten (the job completion log, then
"unknown"), and memory slices as GPU shards (docs/slurm.md, "Submitting to Slurm")."""
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

from harness import GPUPOOL, Daemon, main, one_line, read_if_there, until_exists, wait_until
from slurm_cluster import SlurmCluster
from test_completions import complete

# Prints what the job got: its words, directory, a variable of the submitter's, its GPUs.
REPORT = ("import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
          "'secret': os.environ.get('E2E_SECRET'), 'cvd': os.environ.get('CUDA_VISIBLE_DEVICES'), "
          "'job_gpus': os.environ.get('SLURM_JOB_GPUS'), 'shards': os.environ.get('SLURM_SHARDS_ON_NODE')}))")
NASTY = ["two words", "it's", '"double"', "$HOME", "$(touch /tmp/gpupool-e2e-pwned)", "`id`", "a\nb", "-n",
         "--", "*", "", "back\\slash", "#SBATCH --partition=nosuch", "\nexec false", "tab\there", "日本"]
LOCAL_JOB_KEYS = {"id", "state", "reason", "user", "uid", "gpus", "gpu_uuids", "attempts", "exit_code", "signal",
                  "submit_time", "start_time", "end_time", "pid", "stdout", "stderr", "name", "command", "cwd",
                  "umask", "gpu_count", "mem_mib", "sm_percent", "priority", "after", "retries", "time_limit_s", "kind"}


def sh(script):
    return ["--", "sh", "-c", script]


class SlurmTestCase(unittest.TestCase):
    """One throwaway cluster for the class; gpupool runs with its configuration, a state directory
    of the class's (the record of Slurm jobs) and a runtime directory where no gpupoold listens."""
    cluster_options = {}

    @classmethod
    def setUpClass(cls):
        cls.slurm = SlurmCluster(**cls.cluster_options)
        cls.slurm.__enter__()
        cls.addClassCleanup(cls.slurm.stop)
        cls.root = tempfile.mkdtemp(prefix="gpupool-e2e-sbatch-")
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        os.chmod(cls.root, 0o755)
        cls.work = os.path.join(cls.root, "work")
        cls.state = os.path.join(cls.root, "state")
        cls.runtime = os.path.join(cls.root, "run")
        for d in (cls.work, cls.runtime):
            os.mkdir(d)

    def env(self, **overrides):
        return self.slurm.env(**{"GPUPOOL_SIM": "hgx-h200", "XDG_STATE_HOME": self.state,
                                 "GPUPOOL_RUNTIME_DIR": self.runtime, **overrides})

    def gp(self, *args, env=None, cwd=None, check=False, timeout=120):
        proc = subprocess.run([GPUPOOL, *args], env=env or self.env(), cwd=cwd or self.work, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"gpupool {' '.join(args)} exited {proc.returncode}: {proc.stderr}\n"
                                 f"{self.slurm.logs()}")
        return proc

    def submit(self, *args, **kwargs):
        """gpupool submit --slurm ARGS: checks it printed slurm:ID alone; returns the id."""
        proc = self.gp("submit", "--slurm", *args, check=True, **kwargs)
        match = re.fullmatch(r"slurm:([1-9][0-9]*)\n", proc.stdout)
        self.assertIsNotNone(match, f"submit printed {proc.stdout!r}")
        self.assertEqual(proc.stderr, "")
        return int(match.group(1))

    def listed(self, *args, env=None):
        """gpupool jobs --json ARGS, by id."""
        return {job["id"]: job for job in json.loads(self.gp("jobs", "--json", *args, env=env, check=True).stdout)}

    def job(self, job_id, all=True):
        return self.listed(*(["--all"] if all else [])).get(f"slurm:{job_id}")

    def wait_state(self, job_id, state, timeout=60):
        return wait_until(lambda: (self.job(job_id) or {}).get("state") == state and self.job(job_id),
                          timeout=timeout, interval=0.2, what=f"slurm:{job_id} becoming {state}")

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def touch(self, name):
        open(self.path(name), "w").close()


class SubmitTest(SlurmTestCase):
    def test_a_job_gets_its_words_directory_environment_and_gpus(self):
        project = self.path("my project")
        os.mkdir(project)
        job = self.submit("-g", "2", "--", "python3", "-c", REPORT, *NASTY, cwd=project,
                          env=self.env(E2E_SECRET="s3 cr=t $x"))
        done = self.gp("wait", f"slurm:{job}")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stderr, f"gpupool: job slurm:{job} done\n")
        report = json.loads(self.gp("logs", f"slurm:{job}", check=True).stdout)
        self.assertEqual(report["argv"], NASTY)
        self.assertFalse(os.path.exists("/tmp/gpupool-e2e-pwned"))
        self.assertEqual(report["cwd"], project)
        self.assertEqual(report["secret"], "s3 cr=t $x")
        self.assertEqual(len(report["cvd"].split(",")), 2, report)
        self.assertEqual(len(report["job_gpus"].split(",")), 2, report)
        self.assertTrue(os.path.exists(os.path.join(project, f"gpupool-{job}.out")))
        self.assertTrue(os.path.exists(os.path.join(project, f"gpupool-{job}.err")))
        fields = self.slurm.job(job)
        self.assertEqual(fields["JobName"], "python3")
        self.assertEqual(fields["TresPerNode"], "gres:gpu:2")
        # The record: the user's own, in a directory of their own.
        records = os.path.join(self.state, "gpupool", "slurm-jobs.jsonl")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(records)).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(records).st_mode), 0o600)
        with open(records) as f:
            submitted = [json.loads(line) for line in f if '"ended"' not in line]
        mine = [r for r in submitted if r["slurm_id"] == job]
        self.assertEqual(mine[0]["command"], ["python3", "-c", REPORT, *NASTY])
        self.assertEqual(mine[0]["stdout"], os.path.join(project, f"gpupool-{job}.out"))

    def test_jobs_lists_it_running_then_done_only_with_all(self):
        job = self.submit("--name", "until-told", *sh(until_exists("go-1")))
        running = self.wait_state(job, "running")
        self.assertEqual(running["name"], "until-told")
        self.assertEqual(running["slurm"]["state"], "RUNNING")
        self.assertIn(f"slurm:{job}", self.listed())
        row = [line for line in self.gp("jobs", check=True).stdout.splitlines() if f"slurm:{job} " in line]
        self.assertEqual(len(row), 1)
        self.assertRegex(row[0], rf"slurm:{job}\s+running\s+root\s+until-told\s+1\s")
        self.touch("go-1")
        self.assertEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)
        self.assertNotIn(f"slurm:{job}", self.listed())
        done = self.job(job)
        self.assertEqual(done["state"], "done")
        self.assertEqual(done["exit_code"], 0)
        self.assertIsNotNone(done["end_time"])
        self.assertGreaterEqual(done["end_time"], done["start_time"])
        self.assertIn(f"slurm:{job}", self.listed("-s", "done"))
        self.assertNotIn(f"slurm:{job}", self.listed("-s", "running", "--all"))
        self.assertNotIn(f"slurm:{job}", self.listed("--all", "-u", "nobody"))
        self.assertIn(f"slurm:{job}", self.listed("--all", "-u", "root"))

    def test_a_failing_command_is_failed_with_its_exit_code(self):
        job = self.submit(*sh("echo failing >&2; exit 3"))
        waited = self.gp("wait", f"slurm:{job}")
        self.assertEqual(waited.returncode, 3)
        self.assertEqual(waited.stderr, f"gpupool: job slurm:{job} failed(3)\n")
        failed = self.job(job)
        self.assertEqual((failed["state"], failed["exit_code"]), ("failed", 3))
        self.assertEqual(failed["slurm"]["state"], "FAILED")
        table = self.gp("jobs", "--all", check=True).stdout
        self.assertRegex(table, rf"slurm:{job}\s+failed\(3\)")
        self.assertEqual(self.gp("logs", "-e", f"slurm:{job}", check=True).stdout, "failing\n")

    def test_cancel_ends_a_running_job_as_cancelled(self):
        job = self.submit("--", "sleep", "300")
        self.wait_state(job, "running")
        cancelled = self.gp("cancel", f"slurm:{job}")
        self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
        self.assertNotEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)
        self.assertEqual(self.job(job)["state"], "cancelled")
        self.assertEqual(self.slurm.job(job)["JobState"], "CANCELLED")

    def test_after_waits_for_a_slurm_job_to_end_well(self):
        first = self.submit(*sh(until_exists("go-2") + f"; date +%s.%N > {self.path('first-end')}"))
        second = self.submit("--after", f"slurm:{first}", *sh(f"date +%s.%N > {self.path('second-start')}"))
        self.wait_state(first, "running")
        queued = self.job(second)
        self.assertEqual(queued["state"], "queued")
        self.assertEqual(queued["reason"], f"waiting for slurm:{first}")
        self.assertEqual(queued["after"], [first])
        self.assertEqual(self.slurm.job(second)["Dependency"], f"afterok:{first}(unfulfilled)")
        time.sleep(1)
        self.assertFalse(os.path.exists(self.path("second-start")))
        self.touch("go-2")
        self.assertEqual(self.gp("wait", "-q", f"slurm:{first}", f"slurm:{second}").returncode, 0)
        with open(self.path("first-end")) as a, open(self.path("second-start")) as b:
            self.assertLessEqual(float(a.read()), float(b.read()))

    def test_after_takes_slurm_jobs_only(self):
        proc = self.gp("submit", "--slurm", "--after", "5", "--", "true")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(one_line(proc), proc.stderr)
        self.assertIn("only for Slurm jobs (slurm:ID)", proc.stderr)

    def test_time_limit_and_hold_then_release(self):
        job = self.submit("--time", "90s", "--hold", *sh("exit 0"))
        self.assertEqual(self.slurm.job(job)["TimeLimit"], "00:02:00")
        held = self.job(job)
        self.assertEqual((held["state"], held["reason"]), ("held", "held by its user"))
        self.assertEqual(held["time_limit_s"], 90)
        time.sleep(1)
        self.assertEqual(self.job(job)["state"], "held")
        self.assertEqual(self.gp("release", f"slurm:{job}").returncode, 0)
        self.assertEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)

    def test_hold_keeps_a_queued_job_from_starting(self):
        first = self.submit(*sh(until_exists("go-3")))
        second = self.submit("--after", f"slurm:{first}", "--", "true")
        self.wait_state(first, "running")
        self.assertEqual(self.gp("hold", f"slurm:{second}").returncode, 0)
        self.assertEqual(self.job(second)["state"], "held")
        # Its id completes whole, though bash splits the word at its ':'.
        self.assertIn(str(second), complete(["gpupool", "release", "slurm", ":"], env=self.env(),
                                            line="gpupool release slurm:"))
        self.touch("go-3")
        self.assertEqual(self.gp("wait", "-q", f"slurm:{first}").returncode, 0)
        time.sleep(1)
        self.assertEqual(self.job(second)["state"], "held")
        self.assertEqual(self.gp("release", f"slurm:{second}").returncode, 0)
        self.assertEqual(self.gp("wait", "-q", f"slurm:{second}").returncode, 0)

    def test_logs_shows_output_and_errors_and_follows_until_the_end(self):
        job = self.submit(*sh("echo out1; echo err1 >&2; " + until_exists("go-4") + "; echo out2"))
        self.wait_state(job, "running")
        follower = subprocess.Popen([GPUPOOL, "logs", "-f", f"slurm:{job}"], env=self.env(), cwd=self.work,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: read_if_there(self.path(f"gpupool-{job}.out")) == "out1\n", what="the first line")
        time.sleep(0.5)
        self.assertIsNone(follower.poll(), "logs -f ended before the job")
        self.touch("go-4")
        out, err = follower.communicate(timeout=60)
        self.assertEqual((out, err, follower.returncode), ("out1\nout2\n", "", 0))
        self.assertEqual(self.gp("logs", f"slurm:{job}", check=True).stdout, "out1\nout2\n")
        self.assertEqual(self.gp("logs", "-e", f"slurm:{job}", check=True).stdout, "err1\n")

    def test_an_output_pattern_alone_takes_both_streams_as_sbatch_does(self):
        os.makedirs(self.path("logs"), exist_ok=True)
        job = self.submit("--name", "patterned", "--output", "logs/%x-%5j.txt", *sh("echo out; echo err >&2"))
        self.assertEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)
        path = self.path("logs", f"patterned-{job:05d}.txt")
        self.assertEqual(self.job(job)["stdout"], path)
        self.assertEqual(self.job(job)["stderr"], path)
        self.assertEqual(sorted(self.gp("logs", f"slurm:{job}", check=True).stdout.split()), ["err", "out"])
        self.assertEqual(self.gp("logs", "-e", f"slurm:{job}", check=True).stdout,
                         self.gp("logs", f"slurm:{job}", check=True).stdout)
        refused = self.gp("submit", "--slurm", "--output", "out-%N.txt", "--", "true")
        self.assertEqual(refused.returncode, 1)
        self.assertTrue(one_line(refused), refused.stderr)

    def test_show_and_the_json_shape(self):
        job = self.submit("-g", "2", "--time", "1h", "--", "true")
        self.assertEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)
        shown = self.gp("show", f"slurm:{job}", check=True).stdout
        self.assertRegex(shown, rf"(?m)^id\s+slurm:{job}$")
        self.assertRegex(shown, r"(?m)^state\s+done$")
        self.assertRegex(shown, r"(?m)^slurm state\s+COMPLETED$")
        self.assertRegex(shown, r"(?m)^partition\s+gpu$")
        self.assertRegex(shown, r"(?m)^request\s+2 whole GPU\(s\)$")
        listed = self.job(job)
        self.assertEqual(set(listed), LOCAL_JOB_KEYS | {"slurm"})
        self.assertEqual(listed["id"], f"slurm:{job}")
        self.assertEqual((listed["gpu_count"], listed["time_limit_s"], listed["kind"]), (2, 3600, "batch"))
        self.assertEqual(listed["command"], ["true"])
        self.assertEqual(listed["cwd"], self.work)
        self.assertEqual(listed["slurm"]["id"], job)
        self.assertEqual(listed["slurm"]["partition"], "gpu")
        self.assertIn(listed["slurm"]["source"], ("squeue", "scontrol"))
        as_json = json.loads(self.gp("show", "--json", f"slurm:{job}", check=True).stdout)
        self.assertEqual(as_json["id"], f"slurm:{job}")
        self.assertIn(as_json["slurm"]["time_limit"], ("1:00:00", "01:00:00"))  # squeue's, scontrol's
        unknown = self.gp("show", "slurm:99999")
        self.assertEqual(unknown.returncode, 1)
        self.assertTrue(one_line(unknown), unknown.stderr)
        self.assertIn("no Slurm job 99999", unknown.stderr)

    def test_what_slurm_refuses_or_cannot_do_is_one_line(self):
        for args, words in [(["--partition", "nosuch"], "Invalid partition"),
                            (["--priority", "5"], "--priority above 0"),
                            (["--retries", "2"], "--retries"),
                            (["--mem", "20G"], "no GPU shards configured"),
                            (["--mem", "20G", "--sm", "25"], "--sm is gpupoold's"),
                            (["-g", "9"], "sbatch: error"),
                            (["--after", "slurm:x"], "invalid job id")]:
            proc = self.gp("submit", "--slurm", *args, "--", "true")
            self.assertEqual(proc.returncode, 1, args)
            self.assertTrue(one_line(proc), proc.stderr)
            self.assertIn(words, proc.stderr)
            self.assertEqual(proc.stdout, "")
        usage = self.gp("submit", "--partition", "gpu", "--", "true")
        self.assertEqual(usage.returncode, 2, usage.stderr)
        missing = self.gp("submit", "--slurm", "--", "true", env=self.env(PATH="/nonexistent"))
        self.assertEqual(missing.returncode, 1)
        self.assertEqual(missing.stderr, "gpupool: sbatch: not found on PATH; is Slurm's client installed?\n")

    def test_submissions_at_once_are_all_recorded_whole(self):
        submits = [subprocess.Popen([GPUPOOL, "submit", "--slurm", "--hold", "--name", f"at-once-{i}", "--", "true",
                                     "x" * 20000], env=self.env(), cwd=self.work, stdout=subprocess.PIPE, text=True)
                   for i in range(6)]
        ids = []
        for proc in submits:
            out, _ = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0)
            ids.append(int(out.strip().removeprefix("slurm:")))
        with open(os.path.join(self.state, "gpupool", "slurm-jobs.jsonl")) as f:
            records = [json.loads(line) for line in f]  # every line whole
        self.assertEqual(sorted(r["slurm_id"] for r in records if r.get("name", "").startswith("at-once-")), sorted(ids))
        self.assertEqual(self.gp("cancel", *[f"slurm:{i}" for i in ids]).returncode, 0)

    def test_without_any_daemon_the_recorded_jobs_are_listed(self):
        self.submit("--", "true")
        self.assertEqual(self.gp("jobs", "--all").returncode, 0)
        empty = os.path.join(self.root, "no-records")
        os.makedirs(empty, exist_ok=True)
        proc = self.gp("jobs", env=self.env(XDG_STATE_HOME=empty))
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(one_line(proc), proc.stderr)
        self.assertIn("no gpupoold is running", proc.stderr)

    def test_beside_gpupoolds_jobs(self):
        slurm_env = {k: self.env()[k] for k in ("SLURM_CONF", "PATH", "XDG_STATE_HOME")}
        with Daemon(env=slurm_env) as d:
            local = d.submit("--hold", "--", "true")
            job = self.submit("--hold", "--", "true")
            table = d.gp("jobs", check=True).stdout.splitlines()
            self.assertTrue(table[0].split()[0] == "ID")
            self.assertTrue(any(re.match(rf"\s*{local}\s+held\s", line) for line in table), table)
            self.assertTrue(any(re.match(rf"\s*slurm:{job}\s+held\s", line) for line in table), table)
            both = {j["id"]: j for j in d.gp_json("jobs", "--json")}
            self.assertEqual(set(both[f"slurm:{job}"]) - set(both[local]), {"slurm"})
            self.assertNotIn("slurm", both[local])
            cancelled = d.gp("cancel", str(local), f"slurm:{job}")
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            d.finish(local)
            self.assertNotEqual(d.gp("wait", "-q", f"slurm:{job}").returncode, 0)
            states = {j["id"]: j["state"] for j in d.gp_json("jobs", "--all", "--json")}
            self.assertEqual((states[local], states[f"slurm:{job}"]), ("cancelled", "cancelled"))
            mixed = d.gp("cancel", "99999", "slurm:99999")
            self.assertEqual(mixed.returncode, 1)
            self.assertEqual(mixed.stderr.splitlines(),
                             ["gpupool: scancel: error: Kill job error on job id 99999: Invalid job id specified",
                              "gpupool: no job 99999"])
            held = d.gp("release", f"slurm:{job}")
            self.assertEqual(held.returncode, 1)
            self.assertTrue(one_line(held), held.stderr)
            self.assertIn("already finished", held.stderr)


class ForgetfulClusterTest(SlurmTestCase):
    """A cluster that forgets finished jobs at once (MinJobAge=2) and has GPU shards (one per GiB)."""
    cluster_options = {"extra_conf": "MinJobAge=2\n", "shard_mib": 1024}

    def forgotten(self, job_id):
        wait_until(lambda: self.slurm.job(job_id) == {}, timeout=60, interval=0.5,
                   what=f"Slurm forgetting job {job_id}")

    def test_a_forgotten_job_comes_from_the_completion_log_then_from_the_record(self):
        job = self.submit(*sh("exit 4"))
        self.slurm.wait_job(job)
        self.forgotten(job)
        failed = self.job(job)
        self.assertEqual((failed["state"], failed["exit_code"]), ("failed", 4))
        self.assertEqual(failed["slurm"]["source"], "sacct -c")
        # Now recorded as ended: no longer asked for, it outlives the completion log.
        log = self.slurm.path("log", "jobcomp.txt")
        os.rename(log, log + ".away")
        try:
            self.assertEqual(self.job(job)["state"], "failed")
            gone = self.submit("--", "true")
            self.slurm.wait_job(gone)
            self.forgotten(gone)
            unknown = self.job(gone)
            self.assertEqual((unknown["state"], unknown["reason"]), ("unknown", "Slurm has forgotten it"))
            self.assertNotIn(f"slurm:{gone}", self.listed())
            self.assertRegex(self.gp("jobs", "--all", check=True).stdout, rf"slurm:{gone}\s+unknown\s")
            waited = self.gp("wait", f"slurm:{gone}")
            self.assertEqual((waited.returncode, waited.stderr),
                             (1, f"gpupool: job slurm:{gone} unknown: Slurm has forgotten it\n"))
        finally:
            os.rename(log + ".away", log)

    def test_a_memory_slice_is_shards_of_one_gpu(self):
        job = self.submit("--mem", "4G", "--", "python3", "-c", REPORT)
        self.assertEqual(self.gp("wait", "-q", f"slurm:{job}").returncode, 0)
        report = json.loads(self.gp("logs", f"slurm:{job}", check=True).stdout)
        self.assertEqual(report["shards"], "4")
        self.assertEqual(len(report["cvd"].split(",")), 1, report)
        self.assertEqual(self.job(job)["mem_mib"], 4096)
        coarse = self.submit("--mem", "4G", "--shard-mib", "2048", "--hold", "--", "true")
        self.assertEqual(self.slurm.job(coarse)["TresPerNode"], "gres:shard:2")
        self.gp("cancel", f"slurm:{coarse}", check=True)
        two = self.gp("submit", "--slurm", "-g", "2", "--mem", "4G", "--", "true")
        self.assertEqual(two.returncode, 1)
        self.assertIn("one GPU", two.stderr)


if __name__ == "__main__":
    main()
