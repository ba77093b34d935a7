"""gpupoold's queue end to end: submit, jobs, show, logs, wait, cancel, hold, drain, dependencies,
retries, time limits, placement, and `gpupool run`/`launch` through the queue, on a simulated
8-GPU machine (docs/daemon.md, docs/protocol.md).

The gpupool commands under test run as processes; the tests watch the queue through the protocol
(Daemon.request), since each gpupool process costs about a second in the ASan build."""
import grp
import json
import os
import pwd
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

from harness import (GPUPOOL, SOURCE_DIR, Daemon, LineReader, job_record_script, main, one_line, overlaps,
                     read_records, until_exists, wait_until)

PRINT_ENV = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
             "if k.startswith(('CUDA_', 'GPUPOOL_', 'E2E_'))}))")
ME = pwd.getpwuid(os.geteuid()).pw_name
JOB_FIELDS = {"id", "state", "user", "gpus", "exit_code", "submit_time", "start_time", "end_time"}


def read(path):
    with open(path) as f:
        return f.read()


def sh(script):
    """The argument list of a submission that runs a shell script."""
    return ["--", "sh", "-c", script]


def ids(jobs):
    return [job["id"] for job in jobs]


class QueueTest(unittest.TestCase):
    def test_a_job_runs_in_the_submitters_world(self):
        with Daemon() as d:
            os.mkdir(d.path("project"))
            script = ('echo "cwd=$(pwd)"; echo "umask=$(umask)"; echo "secret=$E2E_SECRET"; '
                      'echo "cvd=$CUDA_VISIBLE_DEVICES"; echo "order=$CUDA_DEVICE_ORDER"; '
                      'echo "gpus=$GPUPOOL_GPUS"; echo "job=$GPUPOOL_JOB"; echo "to stderr" >&2')
            proc = d.gp("submit", "-g", "2", *sh(script), cwd=d.path("project"),
                        env={"E2E_SECRET": "s3 cr=t"}, umask=0o027, check=True)
            self.assertRegex(proc.stdout, r"^[1-9][0-9]*\n$", "submit prints the id and nothing else")
            self.assertEqual(proc.stderr, "")
            job = int(proc.stdout)
            self.assertEqual(d.wait(job).returncode, 0)
            out = dict(line.split("=", 1) for line in d.gp("logs", str(job), check=True).stdout.splitlines())
            self.assertEqual(out["cwd"], d.path("project"))
            self.assertEqual(out["umask"], "0027")
            self.assertEqual(out["secret"], "s3 cr=t")
            self.assertEqual(out["job"], str(job))
            self.assertEqual(out["order"], "PCI_BUS_ID")
            gpus = [int(g) for g in out["gpus"].split(",")]
            self.assertEqual(len(set(gpus)), 2)
            uuids = d.gpu_uuids()
            self.assertEqual(out["cvd"].split(","), [uuids[g] for g in gpus])
            self.assertEqual(d.gp("logs", "--stderr", str(job), check=True).stdout, "to stderr\n")
            shown = d.gp_json("show", "--json", str(job))
            self.assertEqual(shown, d.show(job), "show --json prints the job as the protocol has it")
            self.assertEqual((shown["state"], shown["exit_code"], shown["attempts"]), ("done", 0, 1))
            self.assertEqual(sorted(shown["gpus"]), sorted(gpus))
            self.assertEqual(shown["gpu_uuids"], [uuids[g] for g in shown["gpus"]])
            self.assertEqual(shown["cwd"], d.path("project"))
            self.assertEqual(shown["umask"], 0o027)
            self.assertEqual(shown["command"], ["sh", "-c", script])
            self.assertIn("E2E_SECRET=s3 cr=t", shown["environment"], "the owner sees the environment")
            self.assertEqual(d.leases(), [])

    def test_jobs_lists_and_filters(self):
        with Daemon() as d:
            done = d.submit("--name", "ok", "--", "true")
            failed = d.enqueue(["sh", "-c", "exit 3"])
            d.finish(done, failed)
            running = d.enqueue(["sleep", "60"], gpus=8)
            held = d.enqueue(["true"])
            d.wait_state(running, "running")
            d.request({"op": "hold", "ids": [held]})
            table = d.gp("jobs", check=True).stdout.splitlines()
            self.assertIn("ID", table[0])
            self.assertEqual(sorted(int(line.split()[0]) for line in table[1:]), [running, held])
            self.assertEqual(ids(d.gp_json("jobs", "--json")), [running, held], "unfinished, oldest first")
            everything = d.gp_json("jobs", "--all", "--json")
            self.assertEqual(ids(everything), [done, failed, running, held])
            for job in everything:
                self.assertLessEqual(JOB_FIELDS, set(job), job)
                self.assertEqual(job["user"], ME)
                self.assertNotIn("environment", job, "listings leave environments out")
            by_id = {j["id"]: j for j in everything}
            self.assertEqual([by_id[i]["state"] for i in (done, failed, running, held)],
                             ["done", "failed", "running", "held"])
            self.assertEqual((by_id[done]["exit_code"], by_id[done]["name"]), (0, "ok"))
            self.assertEqual(by_id[failed]["exit_code"], 3)
            self.assertIsNone(by_id[running]["exit_code"])
            self.assertIsNone(by_id[running]["end_time"])
            self.assertEqual(sorted(by_id[running]["gpus"]), list(range(8)))
            self.assertEqual(by_id[held]["gpus"], [])
            self.assertIsNone(by_id[held]["start_time"])
            now = time.time()
            for job in (by_id[done], by_id[failed]):
                self.assertLessEqual(job["submit_time"], job["start_time"])
                self.assertLessEqual(job["start_time"], job["end_time"])
                self.assertLessEqual(job["end_time"], now + 1)
            for args, expected in ((["--state", "failed"], [failed]), (["-s", "held"], [held]),
                                   (["--state", "queued"], []), (["-a", "-u", "nobody"], []),
                                   (["--all", "--user", ME], [done, failed, running, held])):
                self.assertEqual(ids(d.gp_json("jobs", "--json", *args)), expected, args)
            for state, expected in (("done", [done]), ("running", [running]), ("cancelled", [])):
                self.assertEqual(ids(d.jobs(state=state)), expected, state)
            bad_state = d.gp("jobs", "--state", "sleeping")
            self.assertNotEqual(bad_state.returncode, 0)
            self.assertTrue(one_line(bad_state), bad_state.stderr)

    def test_jobs_all_pages_through_a_long_history(self):
        """More finished jobs than one answer holds (a page is at most 1,000): copies of a real
        finished row, written into the stopped daemon's database (as bench/daemon_bench.py does,
        quicker than submitting them)."""
        history = 2500
        with Daemon() as d:
            first = d.submit("--name", "paged", "--", "true")
            d.finish(first)
            d.stop()
            db = sqlite3.connect(os.path.join(d.state_dir, "gpupool.db"))
            db.row_factory = sqlite3.Row
            row = dict(db.execute("SELECT * FROM jobs WHERE id = ?", (first,)).fetchone())
            with db:
                db.executemany(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                               [list(dict(row, id=first + i).values()) for i in range(1, history)])
            db.close()
            d.start()
            expected = list(range(first, first + history))

            table = d.gp("jobs", "--all", check=True).stdout.splitlines()
            self.assertIn("ID", table[0])
            self.assertEqual([int(line.split()[0]) for line in table[1:]], expected, "every job once, in order")
            text = d.gp("jobs", "--all", "--json", check=True).stdout
            listed = json.loads(text)
            self.assertEqual(ids(listed), expected)
            self.assertEqual({job["name"] for job in listed}, {"paged"})
            self.assertTrue(text.startswith('[\n  {\n    "after": [],\n') and text.endswith("\n  }\n]\n"),
                            "one array, as one answer printed it")
            for args in (["--user", ME], ["--state", "done"]):
                self.assertEqual(ids(d.gp_json("jobs", "--all", "--json", *args)), expected, args)
            self.assertEqual(d.gp("jobs", "--json", check=True).stdout, "[]\n")
            self.assertEqual(len(d.gp("jobs", check=True).stdout.splitlines()), 1, "the header alone")
            # Through the protocol: pages of at most 1,000, `more` until the last.
            page = d.request({"op": "jobs", "all": True})
            self.assertEqual((len(page["jobs"]), page.get("more")), (1000, True))
            page = d.request({"op": "jobs", "all": True, "after_id": first + 1999, "limit": 1000})
            self.assertEqual((ids(page["jobs"]), page.get("more")), (expected[2000:], None))
            # `wait` for more jobs than one answer holds.
            self.assertEqual(d.gp("wait", ",".join(map(str, expected)), check=True).returncode, 0)

    def test_status_names_a_fixture_given_as_a_path(self):
        fixture = os.path.join(SOURCE_DIR, "fixtures", "h200-1.json")
        with Daemon(sim=os.path.abspath(fixture)) as d:
            self.assertEqual(d.status()["machine"], f"{os.uname().nodename} (simulated h200-1)")
        with Daemon(sim="hgx-h200") as d:
            self.assertEqual(d.status()["machine"], f"{os.uname().nodename} (simulated hgx-h200)")

    def test_exit_codes_decide_the_state_and_wait_reports_the_worst(self):
        with Daemon() as d:
            ok = d.submit("--", "true")
            three, five, killed = (d.enqueue(["sh", "-c", script])
                                   for script in ("exit 3", "exit 5", "kill -KILL $$"))
            missing = d.enqueue(["/no/such/program"])
            d.finish(ok, three, five, killed, missing)
            self.assertEqual(d.wait(ok).returncode, 0)
            waited = d.wait(ok, three, five)
            self.assertEqual(waited.returncode, 5)
            self.assertEqual(waited.stderr, f"gpupool: 3 jobs: 1 done, 2 failed (ids {three}, {five})\n")
            quiet = d.wait("-q", ok, three)
            self.assertEqual((quiet.returncode, quiet.stderr), (3, ""))
            self.assertEqual(d.wait(killed).returncode, 137)
            jobs = {job["id"]: job for job in d.all_jobs()}
            for job, code in ((three, 3), (five, 5), (killed, 137)):
                self.assertEqual((jobs[job]["state"], jobs[job]["exit_code"]), ("failed", code), jobs[job])
            self.assertEqual(jobs[killed]["signal"], 9)
            self.assertEqual(jobs[missing]["state"], "failed")
            self.assertNotEqual(jobs[missing]["exit_code"], 0)
            self.assertEqual(jobs[ok]["reason"], "")
            self.assertEqual(jobs[three]["reason"], "exit code 3")

    def test_wait_all_drains_the_queue_even_of_jobs_submitted_meanwhile(self):
        with Daemon() as d:
            go_parent, go_child = d.path("go-parent"), d.path("go-child")
            # A job that submits another once `wait --all` is waiting: that one is waited for too.
            child = f"{until_exists(go_child)}; exit 4"
            parent = d.submit("--", "sh", "-c", f"{until_exists(go_parent)}; {GPUPOOL} submit -- sh -c '{child}'")
            held = d.submit("--hold", "--", "true")
            ok = d.submit("--", "true")
            waiter = d.background("wait", "--all", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            # Listed by the waiter or submitted while it waits, the child is waited for either way.
            open(go_parent, "w").close()
            wait_until(lambda: len(d.all_jobs()) == 4, what="the parent job to submit its child")
            open(go_child, "w").close()
            _, errors = waiter.communicate(timeout=60)
            self.assertEqual(waiter.returncode, 4, errors)
            jobs = {job["id"]: job for job in d.all_jobs()}
            second = max(jobs)
            self.assertEqual([jobs[j]["state"] for j in (parent, ok, second)], ["done", "done", "failed"])
            self.assertEqual(jobs[held]["state"], "held")  # never ends by itself: not waited for
            self.assertEqual(errors, f"gpupool: 3 jobs: 2 done, 1 failed (ids {second})\n")
            for args in (["wait"], ["wait", "--all", str(ok)]):
                proc = d.gp(*args)
                self.assertEqual((proc.returncode, proc.stderr), (1, "gpupool: wait needs job ids or --all (not both)\n"))

    def test_cancel_queued_and_running_jobs(self):
        with Daemon() as d:
            politely = d.enqueue(["sh", "-c", f"trap 'echo got TERM > {d.path('term')}; exit 0' TERM; "
                                              f"echo started; while :; do sleep 0.1; done"], gpus=4)
            stubborn = d.enqueue(["sh", "-c", "trap '' TERM; echo started; while :; do sleep 0.1; done"],
                                 gpus=4)
            queued = d.enqueue(["true"])
            for job in (politely, stubborn):
                log = d.wait_state(job, "running")["stdout"]
                wait_until(lambda: os.path.getsize(log) if os.path.exists(log) else 0,
                           what=f"job {job} setting its trap")
            self.assertEqual(d.job_state(queued), "queued")
            cancelled = d.gp("cancel", str(queued))
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            shown = d.show(queued)
            self.assertEqual(shown["state"], "cancelled")
            self.assertIsNone(shown["start_time"], "a cancelled queued job never runs")
            self.assertIn(f"cancelled by {ME}", shown["reason"])
            self.assertEqual(d.wait(queued).returncode, 1)

            self.assertEqual(d.gp("cancel", str(politely)).returncode, 0)
            shown = d.finish(politely)[0]
            self.assertEqual(shown["state"], "cancelled")
            self.assertEqual(read(d.path("term")), "got TERM\n")
            politely_reason = shown["reason"]

            asked = time.time()
            d.request({"op": "cancel", "ids": [stubborn]})
            shown = d.finish(stubborn)[0]
            self.assertEqual(shown["state"], "cancelled")
            self.assertEqual(shown["signal"], 9, "SIGKILL after the grace period")
            self.assertGreaterEqual(shown["end_time"] - asked, 0.4, "kill_grace_s is 0.5")
            self.assertLess(shown["end_time"] - asked, 15)

            again = d.gp("cancel", str(stubborn))
            self.assertNotEqual(again.returncode, 0)
            self.assertIn("already", again.stderr)
            wait_until(lambda: d.held_gpus() == [], what="the cancelled jobs' leases being released")
            self.assertEqual(politely_reason, f"cancelled by {ME}", "it says who cancelled a running job")

    def test_time_limits(self):
        with Daemon() as d:
            sleeper = d.submit("--time", "1s", "--", "sleep", "60")
            stubborn = d.enqueue(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], time_limit_s=1.0)
            quick = d.submit("--time", "1m", "--", "true")
            jobs = {job["id"]: job for job in d.finish(sleeper, stubborn, quick)}
            self.assertEqual((jobs[quick]["state"], jobs[quick]["time_limit_s"]), ("done", 60.0))
            for job, signal_number in ((sleeper, 15), (stubborn, 9)):
                shown = jobs[job]
                self.assertEqual(shown["state"], "failed", shown)
                self.assertIn("time limit", shown["reason"])
                self.assertEqual(shown["time_limit_s"], 1.0)
                self.assertEqual(shown["signal"], signal_number, shown)
                ran = shown["end_time"] - shown["start_time"]
                self.assertGreaterEqual(ran, 0.9)
                self.assertLess(ran, 15)
            shown = jobs[stubborn]
            self.assertGreaterEqual(shown["end_time"] - shown["start_time"], 1.4, "limit + kill_grace_s")

    def test_configured_limits_and_quotas(self):
        config = 'default_time_limit = "1s"\nmax_time_limit = "1m"\n[scheduler]\nquota_gpus = 2\n'
        with Daemon(config=config) as d:
            unlimited = d.enqueue(["sleep", "60"])
            first, second = (d.enqueue(["sh", "-c", until_exists(d.path("go"))], time_limit_s=30)
                             for _ in range(2))
            over_quota = d.enqueue(["true"], time_limit_s=30)
            shown = d.finish(unlimited)[0]
            self.assertEqual((shown["state"], shown["time_limit_s"]), ("failed", 1.0), "default_time_limit")
            self.assertIn("time limit", shown["reason"])
            d.wait_state(first, "running")
            d.wait_state(second, "running")
            d.wait_for_samples()  # with 6 GPUs free
            shown = d.show(over_quota)
            self.assertEqual(shown["state"], "queued", "quota_gpus = 2")
            with self.subTest("a queued job says why it waits"):
                self.assertNotEqual(shown["reason"], "")
            d.touch("go")
            self.assertEqual([job["state"] for job in d.finish(first, second, over_quota)], ["done"] * 3)

            before = len(d.all_jobs())
            for args in (["--time", "2m"], ["-g", "3"]):
                with self.subTest(args=args):
                    proc = d.gp("submit", *args, "--", "true")
                    self.assertNotEqual(proc.returncode, 0, "refused at submission")
                    self.assertEqual(proc.stdout, "")
                    self.assertTrue(one_line(proc), proc.stderr)
            self.assertEqual(len(d.all_jobs()), before, "a refused submission stored a job")

    def test_dependencies(self):
        with Daemon() as d:
            records = d.path("records")
            first = d.enqueue(["sh", "-c", job_record_script(records, until_exists(d.path("go")))])
            second = d.submit("--after", str(first), *sh(job_record_script(records, "true")))
            both = d.submit("--after", f"{first},{second}", *sh(job_record_script(records, "true")))
            d.wait_state(first, "running")
            d.wait_for_samples()  # with 7 GPUs free
            waiting = d.show(second)
            self.assertEqual(waiting["state"], "queued")
            self.assertEqual(waiting["after"], [first])
            self.assertIn(f"job {first}", waiting["reason"])
            self.assertEqual(d.job_state(both), "queued")
            d.touch("go")
            a, b, c = d.finish(first, second, both)
            self.assertEqual([a["state"], b["state"], c["state"]], ["done"] * 3)
            self.assertGreaterEqual(b["start_time"], a["end_time"])
            self.assertGreaterEqual(c["start_time"], b["end_time"])
            runs = read_records(records)
            self.assertGreaterEqual(runs[str(second)][0], runs[str(first)][1], "B started before A ended")
            self.assertGreaterEqual(runs[str(both)][0], runs[str(second)][1])

            broken = d.enqueue(["sh", "-c", "exit 4"])
            dependent = d.submit("--after", str(broken), *sh(f"touch {d.path('ran')}"))
            shown = d.finish(dependent)[0]
            self.assertEqual(shown["state"], "failed")
            self.assertIn(f"job {broken}", shown["reason"])
            self.assertIn("failed", shown["reason"])
            self.assertIsNone(shown["start_time"])
            self.assertFalse(os.path.exists(d.path("ran")))
            # After a job that has already failed: refused or failed at once, never run.
            late = d.gp("submit", "--after", str(broken), *sh(f"touch {d.path('ran')}"))
            if late.returncode == 0:
                self.assertEqual(d.finish(int(late.stdout))[0]["state"], "failed")
            self.assertFalse(os.path.exists(d.path("ran")))

            cancelled = d.enqueue(["sleep", "60"])
            after_cancelled = d.enqueue(["true"], after=[cancelled])
            d.wait_state(cancelled, "running")
            d.request({"op": "cancel", "ids": [cancelled]})
            shown = d.finish(after_cancelled)[0]
            self.assertEqual(shown["state"], "failed")
            self.assertIn("cancelled", shown["reason"])

    def test_retries(self):
        with Daemon() as d:
            def flaky(counter, succeed_at):
                return sh(f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; '
                          f'echo "attempt $n"; [ $n -ge {succeed_at} ]')
            lucky = d.submit("--retries", "2", *flaky(d.path("lucky"), 3))
            unlucky = d.submit("--retries", "1", *flaky(d.path("unlucky"), 3))
            shown = d.finish(lucky)[0]
            self.assertEqual((shown["state"], shown["attempts"], shown["exit_code"]), ("done", 3, 0))
            self.assertEqual(read(d.path("lucky")), "3\n")
            self.assertEqual(d.gp("logs", str(lucky)).stdout, "attempt 1\nattempt 2\nattempt 3\n",
                             "attempts append to one log")
            shown = d.finish(unlucky)[0]
            self.assertEqual((shown["state"], shown["attempts"], shown["exit_code"]), ("failed", 2, 1))
            self.assertEqual(read(d.path("unlucky")), "2\n")

    def test_list_leases_and_top_name_the_job_holding_a_gpu_alike(self):
        with Daemon() as d:
            job = d.enqueue(["sleep", "60"], gpus=1, name="pretrain")
            (gpu,) = d.wait_state(job, "running")["gpus"]
            label = f"job {job} ({ME}, pretrain)"
            listed = d.gp("list", check=True).stdout
            self.assertIn("MEMBW", listed.splitlines()[1])
            row = next(line for line in listed.splitlines() if line.lstrip().startswith(f"{gpu} "))
            self.assertIn(label[:24], row, listed)  # cut to the column, for a long user name
            free = next(line for line in listed.splitlines() if line.lstrip().startswith(f"{(gpu + 1) % 8} "))
            self.assertTrue(free.endswith(" -"), listed)
            self.assertIn(f"job {job} ({ME})", d.gp("leases", check=True).stdout)
            frame = d.gp("top", "--once", env={"COLUMNS": "100", "LINES": "30"}, check=True).stdout
            self.assertIn(label, frame)
            d.request({"op": "cancel", "ids": [job]})
            d.finish(job)

    def test_hold_and_release(self):
        with Daemon() as d:
            blocker = d.enqueue(["sh", "-c", until_exists(d.path("go"))], gpus=8)
            queued = d.enqueue(["touch", d.path("queued-ran")])
            d.wait_state(blocker, "running")
            self.assertEqual(d.gp("hold", str(queued)).returncode, 0)
            shown = d.show(queued)
            self.assertEqual(shown["state"], "held")
            self.assertIn(f"held by {ME}", shown["reason"])
            refused = d.gp("hold", str(blocker))
            self.assertNotEqual(refused.returncode, 0)
            self.assertTrue(one_line(refused), refused.stderr)
            not_held = d.gp("release", str(blocker))
            self.assertNotEqual(not_held.returncode, 0)
            self.assertIn("running, not held", not_held.stderr)
            again = d.gp("hold", str(queued))
            self.assertEqual((again.returncode, again.stderr), (0, ""), "holding a held job changes nothing")
            self.assertIn(f"held by {ME}", d.show(queued)["reason"])
            d.touch("go")
            d.finish(blocker)
            d.wait_for_samples()  # a held job stays put on free GPUs
            self.assertEqual(d.job_state(queued), "held")
            self.assertFalse(os.path.exists(d.path("queued-ran")))
            self.assertEqual(d.gp("release", str(queued)).returncode, 0)
            self.assertEqual(d.finish(queued)[0]["state"], "done")
            self.assertTrue(os.path.exists(d.path("queued-ran")))
            ended = d.gp("release", str(queued))
            self.assertEqual(ended.stderr, f"gpupool: job {queued} has already ended (done)\n")

            # submit --hold: held from the start, even with every GPU free.
            held = d.submit("--hold", "--", "touch", d.path("held-ran"))
            d.wait_for_samples()
            self.assertEqual(d.job_state(held), "held")
            self.assertFalse(os.path.exists(d.path("held-ran")), "a job submitted with --hold ran")
            d.request({"op": "release", "ids": [held]})
            self.assertEqual(d.finish(held)[0]["state"], "done")
            self.assertTrue(os.path.exists(d.path("held-ran")))

    def test_drain_and_resume(self):
        # Root may drain; anyone else needs to be in admin_group.
        admins = "" if os.geteuid() == 0 else f'admin_group = "{grp.getgrgid(os.getegid()).gr_name}"\n'
        with Daemon(config=admins) as d:
            running = d.enqueue(["sh", "-c", until_exists(d.path("go"))])
            d.wait_state(running, "running")
            drained = d.gp("drain", "--reason", "swap GPU 3")
            self.assertEqual((drained.returncode, drained.stdout),
                             (0, "drained: no job starts until `gpupool resume`; 1 running go on, 0 queued wait\n"))
            status = d.status()
            self.assertEqual((status["drained"], status["drained_by"], status["drain_reason"]),
                             (True, ME, "swap GPU 3"))
            waiting = d.enqueue(["true"])
            d.wait_for_samples()
            told = f"drained by {ME}: swap GPU 3 (starts after `gpupool resume`)"
            self.assertEqual((d.job_state(waiting), d.show(waiting)["reason"]), ("queued", told),
                             "a drained daemon starts nothing, and says why")
            self.assertEqual(d.job_state(running), "running", "running jobs go on")
            banner = d.gp("jobs").stdout.splitlines()[0]
            self.assertRegex(banner, rf"^The queue is drained by {ME} since [0-9:]+: swap GPU 3\. "
                                     r"No job starts until `gpupool resume`\.$")
            d.touch("go")
            d.finish(running)
            self.assertEqual(d.job_state(waiting), "queued")
            # Draining, by whom and why, is remembered across a restart.
            self.assertEqual(d.stop(), 0)
            d.start()
            d.wait_for_samples()
            self.assertEqual((d.job_state(waiting), d.show(waiting)["reason"]), ("queued", told))
            resumed = d.gp("resume")
            self.assertEqual(resumed.returncode, 0, resumed.stderr)
            # The job may have started by the time the counts are read.
            self.assertRegex(resumed.stdout, r"^resumed: queued jobs start again \(\d queued, \d running\)\n$")
            self.assertEqual(d.finish(waiting)[0]["state"], "done")
            self.assertEqual((d.status()["drained"], d.status()["drained_by"]), (False, ""))
            self.assertNotIn("drained", d.gp("jobs").stdout)

    def test_drain_and_resume_one_gpu(self):
        admins = "" if os.geteuid() == 0 else f'admin_group = "{grp.getgrgid(os.getegid()).gr_name}"\n'
        with Daemon(config=admins) as d:
            running = d.enqueue(["sh", "-c", until_exists(d.path("go"))])
            gpu = d.wait_state(running, "running")["gpus"][0]
            drained = d.gp("drain", "--gpu", str(gpu), "--reason", "swap fan")
            self.assertEqual((drained.returncode, drained.stdout),
                             (0, f"drained GPU {gpu}: jobs running there go on; no new job starts there until "
                                 f"`gpupool resume --gpu {gpu}`\n"), drained.stderr)
            self.assertEqual([(g["index"], g["by"], g["reason"]) for g in d.status()["drained_gpus"]],
                             [(gpu, ME, "swap fan")])
            self.assertFalse(d.status()["drained"], "the queue itself is not drained")
            wide = d.enqueue(["true"], gpus=8)
            narrow = d.enqueue(["true"])
            self.assertNotEqual(d.finish(narrow)[0]["gpus"], [gpu], "other GPUs take jobs")
            self.assertEqual(d.job_state(running), "running", "its job goes on")
            d.touch("go")
            d.finish(running)
            d.wait_for_samples(3)
            waiting = d.show(wide)
            self.assertEqual((waiting["state"], waiting["wait_reason"]), ("queued", "Resources"))
            self.assertIn(f"drained by {ME}: swap fan", waiting["reason"])
            notice = [line for line in d.gp("jobs").stdout.splitlines() if line.startswith(f"GPU {gpu} ")]
            self.assertEqual(len(notice), 1)
            self.assertRegex(notice[0], rf"^GPU {gpu} is drained by {ME} since [0-9:]+: swap fan\. Its jobs run on; "
                                        rf"none starts on it until `gpupool resume --gpu {gpu}`\.$")
            # Remembered across a restart, and one GPU's resume gives it back.
            self.assertEqual(d.stop(), 0)
            d.start()
            d.wait_for_samples(3)
            self.assertEqual(d.job_state(wide), "queued")
            self.assertEqual(d.gp("resume", "--gpu", str(gpu)).stdout, f"resumed GPU {gpu}: jobs may start there again\n")
            self.assertEqual(d.finish(wide)[0]["state"], "done")
            self.assertEqual(d.status()["drained_gpus"], [])
            self.assertNotEqual(d.gp("drain", "--gpu", "99").returncode, 0)

    def test_logs_follow_streams_while_the_job_runs(self):
        with Daemon() as d:
            job = d.enqueue(["sh", "-c", f"echo one; {until_exists(d.path('go'))}; echo two; sleep 0.3; "
                                         "echo three"])
            d.wait_state(job, "running")
            follow = d.background("logs", "-f", str(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                lines = LineReader(follow.stdout)
                self.assertEqual(lines.readline(), "one\n")
                self.assertIsNone(follow.poll(), "logs -f returned while the job runs")
                d.touch("go")
                self.assertEqual(lines.readline(), "two\n")
                self.assertEqual(lines.readline(), "three\n")
                self.assertEqual(follow.wait(timeout=30), 0, follow.stderr.read())
                self.assertEqual(lines.readline(), "", "more after the job's end")
            finally:
                if follow.poll() is None:
                    follow.kill()
                follow.wait()
                follow.stderr.close()
            self.assertEqual(d.job_state(job), "done")
            # On a finished job it prints the log and returns at once.
            self.assertEqual(d.gp("logs", "-f", str(job), timeout=30).stdout, "one\ntwo\nthree\n")

    def test_logs_tail_prints_the_last_lines_then_follows(self):
        with Daemon() as d:
            job = d.enqueue(["sh", "-c", f"seq 1 5; seq 6 8 >&2; {until_exists(d.path('go'))}; echo six"])
            d.wait_state(job, "running")
            wait_until(lambda: d.gp("logs", "-e", str(job)).stdout == "6\n7\n8\n", what="the job's first lines")
            self.assertEqual(d.gp("logs", "--tail", "2", str(job), check=True).stdout, "4\n5\n")
            self.assertEqual(d.gp("logs", "-n", "1", "-e", str(job), check=True).stdout, "8\n")
            self.assertEqual(d.gp("logs", "-n", "0", str(job), check=True).stdout, "")
            both = d.gp("logs", "--both", "-n", "2", str(job), check=True)
            self.assertEqual((both.stdout, both.stderr), ("4\n5\n", "7\n8\n"), "each stream to its own")
            self.assertEqual(d.gp("logs", "-b", "-e", str(job)).returncode, 2)
            follow = d.background("logs", "-n", "1", "-f", str(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                lines = LineReader(follow.stdout)
                self.assertEqual(lines.readline(), "5\n")
                d.touch("go")
                self.assertEqual(lines.readline(), "six\n")
                self.assertEqual(follow.wait(timeout=30), 0, follow.stderr.read())
            finally:
                if follow.poll() is None:
                    follow.kill()
                follow.wait()
                follow.stderr.close()
            self.assertEqual(d.gp("logs", "-n", "100", str(job), check=True).stdout, "1\n2\n3\n4\n5\nsix\n")

    def test_show_takes_several_ids(self):
        with Daemon() as d:
            first = d.enqueue(["true"], name="first")
            second = d.enqueue(["sh", "-c", "exit 3"], name="second")
            d.finish(first, second)
            both = d.gp_json("show", "--json", str(first), str(second))
            self.assertEqual([j["name"] for j in both], ["first", "second"])
            self.assertEqual(d.gp_json("show", "--json", str(second))["exit_code"], 3, "one id: the object")
            text = d.gp("show", str(second), str(first), check=True).stdout
            self.assertEqual([line.split()[1] for line in text.splitlines() if line.startswith("name ")],
                             ["second", "first"])
            self.assertIn("\n\nid ", text, "a blank line between jobs")
            missing = d.gp("show", str(first), "99999")
            self.assertEqual(missing.returncode, 1)
            self.assertEqual(missing.stderr, "gpupool: no job 99999\n")
            self.assertIn("name         first", missing.stdout, "the jobs that exist are shown all the same")

    def test_twelve_one_gpu_jobs_on_eight_gpus(self):
        with Daemon() as d:
            records = d.path("records")
            jobs = [d.submit(*sh(job_record_script(records, "sleep 0.7"))) for _ in range(2)]
            jobs += [d.enqueue(["sh", "-c", job_record_script(records, "sleep 0.7")]) for _ in range(10)]
            self.assertEqual([job["state"] for job in d.finish(*jobs)], ["done"] * 12)
            runs = read_records(records)
            self.assertEqual(sorted(runs), sorted(str(j) for j in jobs))
            clashes, most = overlaps(runs)
            self.assertEqual(clashes, [], "jobs shared a GPU")
            self.assertLessEqual(most, 8)
            for shown in d.all_jobs():
                self.assertEqual(len(shown["gpus"]), 1)
                self.assertEqual(shown["gpus"], runs[str(shown["id"])][2], "the job saw its GPUs")
            self.assertEqual(d.held_gpus(), [])

    def test_a_multi_gpu_job_gets_distinct_gpus(self):
        with Daemon() as d:
            job = d.submit("-g", "4", "--", sys.executable, "-c", PRINT_ENV)
            d.finish(job)
            env = json.loads(d.gp("logs", str(job), check=True).stdout)
            gpus = [int(g) for g in env["GPUPOOL_GPUS"].split(",")]
            self.assertEqual(len(set(gpus)), 4)
            uuids = d.gpu_uuids()
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"].split(","), [uuids[g] for g in gpus])
            self.assertEqual(len(set(env["CUDA_VISIBLE_DEVICES"].split(","))), 4)
            self.assertEqual(sorted(d.show(job)["gpus"]), sorted(gpus))
            self.assertNotIn("GPUPOOL_MEM_MIB", env)

    def test_memory_slices_share_a_gpu(self):
        with Daemon() as d:
            slices = [d.submit("--mem", "20G", *sh(f"echo $GPUPOOL_MEM_MIB; {until_exists(d.path('go'))}"))
                      for _ in range(2)]
            shown = [d.wait_state(job, "running") for job in slices]
            self.assertEqual(shown[0]["gpus"], shown[1]["gpus"], "slices are packed onto one GPU")
            self.assertEqual(shown[0]["mem_mib"], 20480)
            leases = d.leases()
            self.assertEqual(len(leases), 2)
            self.assertEqual({lease["mem_mib"] for lease in leases}, {20480})
            d.touch("go")
            self.assertEqual([job["state"] for job in d.finish(*slices)], ["done"] * 2)
            self.assertEqual(read(shown[0]["stdout"]), "20480\n")

    def test_bad_requests_are_refused_with_one_line_and_store_nothing(self):
        with Daemon() as d:
            d.finish(d.enqueue(["true"]))
            for args in (["--time", "xyz"], ["--time", "0"], ["-g", "0"], ["-g", "9"], ["--after", "99999"],
                         ["--after", "abc"], ["--after", "0"], ["--after", "1,x"], ["--mem", "20X"],
                         ["--mem", "200G"], ["--retries", "-1"], ["-g", "two"]):
                with self.subTest(args=args):
                    proc = d.gp("submit", *args, "--", "true")
                    self.assertNotEqual(proc.returncode, 0)
                    self.assertEqual(proc.stdout, "")
                    self.assertTrue(one_line(proc), proc.stderr)
            for args in (["show", "abc"], ["show", "99999"], ["cancel", "1x"], ["cancel", "99999"],
                         ["hold", "0"], ["release", "-5"], ["wait", "abc"], ["wait", "99999"], ["logs", "x1"],
                         ["logs", "99999"]):
                with self.subTest(args=args):
                    proc = d.gp(*args)
                    self.assertNotEqual(proc.returncode, 0)
                    self.assertTrue(one_line(proc), proc.stderr)
            self.assertEqual(len(d.all_jobs()), 1, "a refused request stored a job")
            missing = d.gp("submit", "--", "true", env={"GPUPOOL_RUNTIME_DIR": d.path("nowhere")})
            self.assertNotEqual(missing.returncode, 0)
            self.assertIn("no gpupoold is running", missing.stderr)

    def test_run_and_launch_go_through_the_queue(self):
        with Daemon() as d:
            proc = d.gp("run", "-g", "2", "--", sys.executable, "-c", PRINT_ENV)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            env = json.loads(proc.stdout)
            failing = d.gp("run", "-q", "--", "sh", "-c", "exit 3")
            self.assertEqual(failing.returncode, 3)
            launched = d.gp("launch", "-q", "-g", "2", "--", "sh", "-c", "echo rank $RANK of $WORLD_SIZE")
            self.assertEqual(launched.returncode, 0, launched.stderr)
            self.assertEqual(sorted(launched.stdout.splitlines()),
                             ["[rank 0] rank 0 of 2", "[rank 1] rank 1 of 2"])
            jobs = d.all_jobs()
            self.assertEqual([j["kind"] for j in jobs], ["interactive"] * 3)
            run_job, failed_job, launch_job = jobs
            self.assertEqual(env["GPUPOOL_JOB"], str(run_job["id"]))
            self.assertEqual((run_job["state"], run_job["exit_code"], run_job["gpu_count"]), ("done", 0, 2))
            self.assertEqual([int(g) for g in env["GPUPOOL_GPUS"].split(",")], run_job["gpus"])
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"].split(","), run_job["gpu_uuids"])
            self.assertEqual((failed_job["state"], failed_job["exit_code"]), ("failed", 3))
            self.assertEqual((launch_job["state"], launch_job["exit_code"], len(launch_job["gpus"])),
                             ("done", 0, 2))
            self.assertEqual(d.held_gpus(), [])
            no_logs = d.gp("logs", str(run_job["id"]))
            self.assertNotEqual(no_logs.returncode, 0)
            self.assertTrue(one_line(no_logs), no_logs.stderr)
            # Without a daemon, run and launch take the GPUs themselves, as before.
            self.assertEqual(d.stop(), 0)
            alone = d.gp("run", "-g", "2", "--", sys.executable, "-c", PRINT_ENV)
            self.assertEqual(alone.returncode, 0, alone.stderr)
            self.assertEqual(len(json.loads(alone.stdout)["GPUPOOL_GPUS"].split(",")), 2)
            self.assertTrue(json.loads(alone.stdout)["GPUPOOL_JOB"].startswith("run-"))
            self.assertEqual(d.gp("launch", "-q", "-g", "2", "--", "true").returncode, 0)
            self.assertEqual(d.gp("run", "--", "sh", "-c", "exit 3").returncode, 3)
            self.assertEqual(d.held_gpus(), [])
            d.start()
            self.assertEqual(len(d.all_jobs()), 3, "nothing went through the stopped daemon")

    def test_run_waits_behind_busy_gpus(self):
        with Daemon() as d:
            short = d.enqueue(["sh", "-c", until_exists(d.path("go"))])
            longer = [d.enqueue(["sleep", "60"]) for _ in range(7)]
            wait_until(lambda: len(d.jobs(state="running")) == 8, what="8 jobs running")
            run = d.background("run", "--", sys.executable, "-c", PRINT_ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            try:
                queued = wait_until(lambda: d.jobs(state="queued"), what="the run's job queued")[0]
                self.assertEqual(queued["kind"], "interactive")
                d.wait_for_samples()
                self.assertEqual(d.job_state(queued["id"]), "queued")
                self.assertIsNone(run.poll(), "gpupool run started while all GPUs were busy")
                short_gpus = d.show(short)["gpus"]
                d.touch("go")
                out, err = run.communicate(timeout=60)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.communicate()
            self.assertEqual(run.returncode, 0, err)
            self.assertIn("queued", err)
            self.assertEqual([int(g) for g in json.loads(out)["GPUPOOL_GPUS"].split(",")], short_gpus)
            self.assertEqual(d.job_state(queued["id"]), "done")
            self.assertEqual([d.job_state(job) for job in longer], ["running"] * 7)

    def test_cancelling_a_waiting_run_tells_its_client(self):
        with Daemon() as d:
            blocker = d.enqueue(["sleep", "60"], gpus=8)
            d.wait_state(blocker, "running")
            run = d.background("run", "--", "touch", d.path("ran"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            try:
                queued = wait_until(lambda: d.jobs(state="queued"), what="the run's job queued")[0]["id"]
                self.assertEqual(d.gp("cancel", str(queued)).returncode, 0)
                _, err = run.communicate(timeout=30)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.communicate()
            self.assertNotEqual(run.returncode, 0)
            self.assertIn("cancelled", err)
            self.assertFalse(os.path.exists(d.path("ran")))
            self.assertEqual(d.job_state(queued), "cancelled")

    def test_interactive_jobs_cancelled_or_abandoned(self):
        with Daemon() as d:
            # Cancelling a running `gpupool run` sends SIGTERM through the client to its program.
            run = d.background("run", "-q", "--", "sh", "-c", f"touch {d.path('started')}; exec sleep 60",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            job = wait_until(lambda: d.jobs(state="running"), what="the run's job running")[0]["id"]
            wait_until(lambda: os.path.exists(d.path("started")), what="the program starting")
            d.request({"op": "cancel", "ids": [job]})
            run.communicate(timeout=30)
            self.assertEqual(run.returncode, 143)
            shown = d.show(job)
            self.assertEqual((shown["state"], shown["reason"]), ("cancelled", f"cancelled by {ME}"))

            # A client killed while its program runs: the program keeps its GPUs until it ends.
            program = f"touch {d.path('orphan')}; {until_exists(d.path('go'))}; touch {d.path('ended')}"
            run = d.background("run", "-q", "-g", "8", "--", "sh", "-c", program)
            job = wait_until(lambda: d.jobs(state="running"), what="the run's job running")[0]["id"]
            wait_until(lambda: os.path.exists(d.path("orphan")), what="the program starting")
            run.kill()
            run.wait()
            wait_until(lambda: d.job_state(job) != "running", what="the job ending with its client")
            self.assertEqual(len(d.held_gpus()), 8)
            batch = d.enqueue(["true"])
            d.wait_for_samples()
            self.assertEqual(d.job_state(batch), "queued", "a GPU of the orphaned program was given away")
            d.touch("go")
            self.assertEqual(d.finish(batch)[0]["state"], "done")
            self.assertTrue(os.path.exists(d.path("ended")))

            # A client killed while it waits gives up its place.
            blocker = d.enqueue(["sleep", "60"], gpus=8)
            d.wait_state(blocker, "running")
            run = d.background("run", "-q", "--", "touch", d.path("ran"))
            job = wait_until(lambda: d.jobs(state="queued"), what="the run's job queued")[0]["id"]
            run.kill()
            run.wait()
            self.assertEqual(d.finish(job)[0]["state"], "cancelled")
            self.assertFalse(os.path.exists(d.path("ran")))


    def test_what_the_quota_can_never_allow_is_refused_at_submit(self):
        with Daemon(config="[scheduler]\nquota_gpus = 2\n") as d:
            for command in (["submit", "-g", "3", "--", "true"], ["run", "-g", "3", "--", "true"],
                            ["submit", "-g", "3", "--mem", "100G", "--", "true"]):  # 3 x 0.7 of an H200
                proc = d.gp(*command)
                self.assertNotEqual(proc.returncode, 0, command)
                self.assertTrue(one_line(proc), proc.stderr)
                self.assertIn("above the quota of 2.00 per user", proc.stderr)
            self.assertEqual(d.all_jobs(), [], "a refused job was stored")
            self.assertEqual(d.finish(d.submit("-g", "2", "--", "true"))[0]["state"], "done")

    def test_submit_hold_stores_the_job_held(self):
        with Daemon() as d:
            held = d.submit("--hold", "--", "touch", d.path("held-ran"))
            shown = d.show(held)
            self.assertEqual((shown["state"], shown["reason"]), ("held", f"held by {ME}"))
            job = {"command": ["touch", d.path("also-ran")], "cwd": d.work, "gpu_count": 1,
                   "environment": [f"{k}={v}" for k, v in d.env.items()]}
            also = d.request({"op": "submit", "hold": True, "job": job})["id"]
            self.assertEqual(d.job_state(also), "held")
            d.wait_for_samples()  # on free GPUs
            self.assertEqual([d.job_state(held), d.job_state(also)], ["held", "held"])
            self.assertFalse(os.path.exists(d.path("held-ran")), "a job submitted with --hold ran")
            with self.assertRaisesRegex(AssertionError, "'hold' must be true or false"):
                d.request({"op": "submit", "hold": "yes", "job": job})
            d.request({"op": "release", "ids": [held, also]})
            self.assertEqual([j["state"] for j in d.finish(held, also)], ["done", "done"])
            self.assertTrue(os.path.exists(d.path("held-ran")))

    def test_run_keeps_to_its_gpus_through_the_queue(self):
        with Daemon() as d:
            uuids = d.gpu_uuids()
            proc = d.gp("run", "-q", "--gpus", "5", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
            self.assertEqual((proc.returncode, proc.stdout), (0, uuids[5] + "\n"), proc.stderr)
            for _ in range(3):
                proc = d.gp("run", "-q", "-g", "3", "--exclude", f"0,1,2,{uuids[4]}", "--",
                            "sh", "-c", "echo $GPUPOOL_GPUS")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertTrue({int(g) for g in proc.stdout.split(",")} <= {3, 5, 6, 7}, proc.stdout)
            never = d.gp("run", "-g", "2", "--gpus", "1", "--", "true")
            self.assertNotEqual(never.returncode, 0)
            self.assertTrue(one_line(never), never.stderr)
            self.assertIn("may use only 1 (GPU 1)", never.stderr)
            self.assertEqual(len(d.all_jobs()), 4, "the refused run was stored")

            # Kept to a busy GPU, a run waits for it although the others are free.
            holder = d.background("run", "-q", "--gpus", "5", "--", "sh", "-c", until_exists(d.path("go")))
            waiter = None
            try:
                # The holder first: started together, the waiter could take GPU 5 before it.
                wait_until(lambda: d.jobs(state="running"), what="the first run holding GPU 5")
                waiter = d.background("run", "--gpus", "5", "--", "sh", "-c", "echo $GPUPOOL_GPUS",
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                queued = wait_until(lambda: d.jobs(state="queued"), what="the second run queued")[0]
                self.assertIn("GPU 5", d.show(queued["id"])["reason"])
                d.wait_for_samples()
                self.assertEqual(d.job_state(queued["id"]), "queued")
                self.assertIsNone(waiter.poll(), "the run kept to GPU 5 started elsewhere")
                d.touch("go")
                out, err = waiter.communicate(timeout=60)
                holder.wait(timeout=60)
            finally:
                for proc in (holder, waiter):
                    if proc is not None and proc.poll() is None:
                        proc.kill()
                        proc.communicate()
            self.assertEqual((waiter.returncode, out), (0, "5\n"), err)
            self.assertIn("GPU 5", err)
            self.assertEqual(d.held_gpus(), [])

    def test_a_run_cancelled_as_it_is_granted_ends_cleanly(self):
        # Every other time the client is stopped while it waits, so that the grant and the cancel's
        # SIGTERM both reach it before it can start its program; else it is a race.
        before_start = 0
        with Daemon() as d:
            for attempt in range(6):
                stopped = attempt % 2 == 0
                go = d.path(f"go-{attempt}")
                started = d.path(f"started-{attempt}")
                blocker = d.enqueue(["sh", "-c", until_exists(go)], gpus=8)
                d.wait_state(blocker, "running")
                run = d.background("run", "-q", "--", "sh", "-c", f"touch {started}; exec sleep 60",
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                try:
                    job = wait_until(lambda: d.jobs(state="queued"), what="the run's job queued")[0]["id"]
                    if stopped:
                        os.kill(run.pid, signal.SIGSTOP)
                    d.touch(f"go-{attempt}")
                    wait_until(lambda: d.job_state(job) == "running", interval=0.001, what="the run granted")
                    d.request({"op": "cancel", "ids": [job]})
                    if stopped:
                        os.kill(run.pid, signal.SIGCONT)
                    _, err = run.communicate(timeout=30)
                finally:
                    if run.poll() is None:
                        run.kill()
                        run.communicate()
                if not stopped and run.returncode == 143 and err == "":
                    pass  # the program had started: it got the SIGTERM, as any cancelled run's does
                else:
                    before_start += 1
                    self.assertNotIn(run.returncode, (0, 143), err)
                    self.assertEqual(err, f"gpupool: job {job} cancelled before it started\n")
                    self.assertFalse(os.path.exists(started))
                shown = d.finish(job)[0]
                self.assertEqual((shown["state"], shown["reason"]), ("cancelled", f"cancelled by {ME}"))
                d.finish(blocker)
                wait_until(lambda: d.held_gpus() == [], what="every lease released")
        self.assertGreaterEqual(before_start, 3)

if __name__ == "__main__":
    main()
