"""A batch job whose supervisor is killed with SIGKILL (docs/daemon.md, "Supervisors"): the
daemon itself ends the job's process group at its time limit or a cancel (SIGTERM, the grace
period, SIGKILL), records the job's end once its processes are gone, and frees its GPUs only
then."""
import json
import os
import signal
import unittest

from harness import Daemon, main, process_gone, wait_until

# A job whose processes all ignore SIGTERM, so only the SIGKILL after the grace period ends them.
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 120 & wait"]


def started_record(d, job):
    """The attempt record's supervisor and job pids, once the job has started."""
    def read():
        try:
            with open(os.path.join(d.state_dir, "attempts", f"{job}.1")) as f:
                events = [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return None
        started = [e for e in events if e["event"] == "started"]
        return (events[0]["supervisor_pid"], started[0]["job_pid"]) if started else None
    return wait_until(read, what=f"job {job} recorded as started")


def group_members(group):
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == group:
            members.append(int(name))
    return members


def kill_supervisor(test, d, job):
    """Kills the job's supervisor; returns the job's process group once the daemon has taken it up."""
    supervisor, group = started_record(d, job)
    wait_until(lambda: len(group_members(group)) == 2, what="the job's shell and its sleep")
    os.kill(supervisor, signal.SIGKILL)
    wait_until(lambda: f"job {job}: its supervisor was killed" in d.log_text(),
               what="the daemon noticing the lost supervisor")
    shown = d.show(job)
    test.assertEqual(shown["state"], "running", "its processes live on")
    test.assertEqual(len(group_members(group)), 2)
    return group, shown


class LostSupervisorTest(unittest.TestCase):
    def test_the_daemon_ends_a_lost_job_at_its_time_limit(self):
        with Daemon() as d:
            job = d.submit("--time", "4s", "--", *STUBBORN)
            group, shown = kill_supervisor(self, d, job)
            self.assertEqual(len(d.held_gpus()), 1)
            ended = d.wait_state(job, "failed", "done", "cancelled", timeout=60)
            self.assertEqual((ended["state"], ended["reason"]), ("failed", "time limit"))
            self.assertGreaterEqual(ended["end_time"], shown["start_time"] + 4)
            self.assertEqual(group_members(group), [], "ended by the SIGKILL after the grace period")
            wait_until(lambda: d.held_gpus() == [], what="its GPU's lease going with its processes")
            # The GPU goes to the next job.
            after = d.submit("-g", "8", "--", "true")
            self.assertEqual(d.finish(after)[0]["state"], "done")

    def test_a_lost_job_can_be_cancelled(self):
        with Daemon() as d:
            job = d.submit("--", *STUBBORN)
            group, _ = kill_supervisor(self, d, job)
            cancelled = d.gp("cancel", str(job))
            self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
            ended = d.wait_state(job, "failed", "done", "cancelled", timeout=60)
            self.assertEqual(ended["state"], "cancelled")
            self.assertEqual(group_members(group), [])
            wait_until(lambda: d.held_gpus() == [], what="its GPU's lease going with its processes")

    def test_a_lost_job_whose_processes_end_is_recorded_failed(self):
        with Daemon() as d:
            job = d.submit("--", "sh", "-c", "sleep 120 & wait; exit 0")
            group, _ = kill_supervisor(self, d, job)
            for pid in group_members(group):
                os.kill(pid, signal.SIGKILL)
            ended = d.wait_state(job, "failed", "done", "cancelled", timeout=60)
            self.assertEqual((ended["state"], ended["reason"]), ("failed", "supervisor lost"))
            wait_until(lambda: d.held_gpus() == [], what="its GPU's lease going with its processes")


if __name__ == "__main__":
    main()
