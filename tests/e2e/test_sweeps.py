"""Sweeps: array jobs (`submit --array`, each task seeing its index, at most %N running, also
across a restart), cancel in bulk (--all, -u, --state, id ranges), a batch script's #GPUPOOL
directives, and a script read from standard input."""
import os
import re
import unittest

from harness import Daemon, main, one_line, read_if_there, request_as, until_exists, wait_until

OTHER_UID = 45678  # another user, as the daemon sees it (no account needed)


def array_ids(proc):
    """The ids `submit --array` printed as FIRST-LAST."""
    match = re.fullmatch(r"([1-9][0-9]*)-([1-9][0-9]*)\n", proc.stdout)
    if proc.returncode != 0 or not match:
        raise AssertionError(f"submit --array exited {proc.returncode} printing {proc.stdout!r}: {proc.stderr}")
    return list(range(int(match.group(1)), int(match.group(2)) + 1))


def write_script(d, name, text):
    path = d.path(name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


class ArrayTest(unittest.TestCase):
    def running_and_queued(self, d, ids):
        states = {job["id"]: job for job in d.jobs() if job["id"] in ids}
        return ([i for i in ids if states.get(i, {}).get("state") == "running"],
                [i for i in ids if states.get(i, {}).get("state") == "queued"])

    def test_tasks_see_their_index_and_at_most_the_limit_run_also_after_a_restart(self):
        with Daemon() as d:
            script = f'echo "task $GPUPOOL_ARRAY_TASK_ID of $GPUPOOL_ARRAY_JOB_ID"; ' + \
                     until_exists(d.path("go-$GPUPOOL_ARRAY_TASK_ID"))
            ids = array_ids(d.gp("submit", "--array", "0-10:2%2", "--name", "sweep", "--", "sh", "-c", script))
            self.assertEqual(len(ids), 6)
            wait_until(lambda: len(self.running_and_queued(d, ids)[0]) == 2, what="two tasks running")
            for restarted in (False, True):
                if restarted:
                    d.stop()
                    d.start()
                d.wait_for_samples()  # the scheduler has looked again: still two
                running, queued = self.running_and_queued(d, ids)
                self.assertEqual((running, queued), (ids[:2], ids[2:]), f"restarted: {restarted}")
                self.assertEqual(d.show(ids[3])["reason"], f"array limit: 2 of array {ids[0]} running")
            shown = d.show(ids[3])
            self.assertEqual((shown["array_id"], shown["array_index"], shown["array_limit"]), (ids[0], 6, 2))
            table = d.gp("jobs", check=True).stdout
            self.assertIn("sweep[6]", table)
            for index in range(0, 11, 2):
                d.touch(f"go-{index}")
            for job, index in zip(d.finish(*ids), range(0, 11, 2)):
                self.assertEqual(job["state"], "done", job["reason"])
                self.assertEqual(read_if_there(job["stdout"]), f"task {index} of {ids[0]}\n")

    def test_an_array_is_stored_whole_or_not_at_all(self):
        with Daemon(config="[scheduler]\nmax_queued_jobs_per_user = 5\n") as d:
            refused = d.gp("submit", "--hold", "--array", "0-5", "--", "true")
            self.assertEqual(refused.returncode, 1)
            self.assertTrue(one_line(refused), refused.stderr)
            self.assertIn("6 tasks more would be above max_queued_jobs_per_user = 5", refused.stderr)
            self.assertEqual(d.all_jobs(), [], "no task of a refused array is stored")
            ids = array_ids(d.gp("submit", "--hold", "--array", "1,3,5-7", "--", "true"))
            self.assertEqual([job["array_index"] for job in d.jobs()], [1, 3, 5, 6, 7])
            self.assertEqual({job["array_id"] for job in d.jobs()}, {ids[0]})
            for bad in (["--array", "0-10000"], ["--array", "5-2"], ["--array", "0-9%0"],
                        ["--array", "0-3", "--slurm"]):
                with self.subTest(bad=bad):
                    proc = d.gp("submit", *bad, "--", "true")
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertTrue(one_line(proc), proc.stderr)
            self.assertEqual(len(d.all_jobs()), 5)
            d.gp("cancel", f"{ids[0]}-{ids[-1]}", check=True)


class BulkCancelTest(unittest.TestCase):
    def test_cancel_by_selection_and_range_keeps_to_what_was_chosen(self):
        with Daemon(mode=0o755) as d:  # 0755: another uid reaches the socket
            held = [d.submit("--hold", "--", "true") for _ in range(4)]
            running = d.submit("--", "sh", "-c", "sleep 60")
            d.wait_state(running, "running")
            theirs = None
            if os.geteuid() == 0:
                job = {"command": ["true"], "cwd": "/", "environment": ["PATH=/usr/bin:/bin"]}
                theirs = request_as(d, OTHER_UID, {"op": "submit", "hold": True, "job": job})["id"]

            ranged = d.gp("cancel", f"{held[0]}-{held[1]}")
            self.assertEqual((ranged.returncode, ranged.stdout), (0, "cancelled 2 jobs\n"), ranged.stderr)
            released = d.gp("release", f"{held[2]},{held[3]}")
            self.assertEqual((released.returncode, released.stdout), (0, "released 2 jobs\n"), released.stderr)
            d.finish(held[2], held[3])
            held_again = d.submit("--hold", "--", "true")
            by_state = d.gp("cancel", "--state", "held")
            self.assertEqual((by_state.returncode, by_state.stdout), (0, "cancelled 1 job\n"), by_state.stderr)
            self.assertEqual(d.job_state(held_again), "cancelled")
            self.assertEqual(d.job_state(running), "running", "--state held leaves running jobs alone")
            if theirs:
                self.assertEqual(d.job_state(theirs), "held", "--state chooses among one's own jobs")

            mine = d.gp("cancel", "--all")
            self.assertEqual((mine.returncode, mine.stdout), (0, "cancelled 1 job\n"), mine.stderr)
            self.assertEqual(d.finish(running)[0]["state"], "cancelled")
            if theirs:
                self.assertEqual(d.job_state(theirs), "held", "--all is one's own jobs, even for root")
                other = d.gp("cancel", "-u", str(OTHER_UID))
                self.assertEqual((other.returncode, other.stdout), (0, "cancelled 1 job\n"), other.stderr)
                self.assertEqual(d.job_state(theirs), "cancelled")
            nothing = d.gp("cancel", "--all")
            self.assertEqual((nothing.returncode, nothing.stdout), (0, "cancelled 0 jobs\n"), nothing.stderr)

            for bad in ([], ["--state", "done"], ["1-x"], ["0-3"], ["1-200000"]):
                with self.subTest(bad=bad):
                    proc = d.gp("cancel", *bad)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertTrue(one_line(proc), proc.stderr)


class BatchScriptTest(unittest.TestCase):
    def test_directives_apply_and_the_command_line_wins(self):
        with Daemon() as d:
            write_script(d, "train.sh", "#!/bin/sh\n# trains\n#GPUPOOL --name from-script -g 2\n\n"
                                        "#GPUPOOL --time 1h\necho \"gpus=$CUDA_VISIBLE_DEVICES\"\n"
                                        "#GPUPOOL --name too-late\n")
            job = d.submit("train.sh")
            shown = d.show(job)
            self.assertEqual((shown["name"], shown["gpu_count"], shown["time_limit_s"]), ("from-script", 2, 3600))
            self.assertEqual(shown["command"], ["./train.sh"], "a script here runs as ./NAME, as sbatch runs it")
            done = d.finish(job)[0]
            self.assertEqual(done["state"], "done", done["reason"])
            self.assertEqual(len(read_if_there(done["stdout"]).strip().split("=")[1].split(",")), 2)
            overridden = d.show(d.submit("--name", "typed", "-g", "1", d.path("train.sh")))
            self.assertEqual((overridden["name"], overridden["gpu_count"], overridden["time_limit_s"]),
                             ("typed", 1, 3600))
            d.finish(overridden["id"])

    def test_a_bad_directive_names_its_file_and_line(self):
        with Daemon() as d:
            cases = {"#!/bin/sh\n\n#GPUPOOL --gpu-count lots\ntrue\n": "bad.sh:3: ",
                     "#!/bin/sh\n#GPUPOOL train.py\n": "bad.sh:2: 'train.py' is not an option of submit",
                     "#!/bin/sh\n#GPUPOOL --bogus\n": "bad.sh:2: unknown option '--bogus'",
                     "#!/bin/sh\n#GPUPOOL --name 'open\n": "bad.sh:2: a quote is not closed"}
            for text, start in cases.items():
                with self.subTest(text=text):
                    write_script(d, "bad.sh", text)
                    proc = d.gp("submit", "./bad.sh")
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertTrue(one_line(proc), proc.stderr)
                    self.assertTrue(proc.stderr.startswith(f"gpupool: ./{start}"), proc.stderr)
            self.assertEqual(d.all_jobs(), [])

    def test_a_script_on_standard_input_runs_with_its_shell(self):
        with Daemon() as d:
            job = d.submit(input="#!/bin/sh\n#GPUPOOL --name piped\necho \"from stdin $0\"\n")
            shown = d.finish(job)[0]
            self.assertEqual((shown["name"], shown["state"], shown["command"][:2]), ("piped", "done", ["/bin/sh", "-c"]))
            self.assertEqual(read_if_there(shown["stdout"]), "from stdin gpupool-script\n")
            plain = d.finish(d.submit("-g", "1", input="echo plain\n"))[0]
            self.assertEqual(read_if_there(plain["stdout"]), "plain\n")
            for text in ("#!/usr/bin/env python3\nprint(1)\n", ""):
                with self.subTest(text=text):
                    proc = d.gp("submit", input=text)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertTrue(one_line(proc), proc.stderr)
            self.assertEqual(len(d.all_jobs()), 2)


if __name__ == "__main__":
    main()
