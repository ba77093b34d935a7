"""Attacks by hostile local users on a root gpupoold (docs/security.md): each test reproduces one
way a user once borrowed another's rights, and checks that it no longer works. Needs root, to
act as several uids and to create a throwaway administrators' group."""
import grp
import json
import os
import secrets
import signal
import socket
import time
import unittest

from harness import CAN_ADD_USERS, Daemon, RawConnection, ThrowawayUsers, main, request_as
from test_http_limits import rss_kib

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
VICTIM, ATTACKER, IMPOSTOR = 61001, 61002, 61003  # uids without accounts


def can_choose_pids():
    try:
        with open(NS_LAST_PID, "r+"):
            return True
    except OSError:
        return False


def become(uid, groups):
    os.setgroups(groups)
    os.setgid(uid)
    os.setuid(uid)


def connect_as(uid, socket_path):
    """A connection to the daemon made by a child process of `uid` with no supplementary group, and
    that child's pid. The child hands the connected socket over and exits: its pid is free."""
    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            parent_end.close()
            become(uid, [])
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(socket_path)
            socket.send_fds(child_end, [b"x"], [connection.fileno()])
        finally:
            os._exit(0)
    child_end.close()
    _, fds, _, _ = socket.recv_fds(parent_end, 1, 1)
    parent_end.close()
    os.waitpid(pid, 0)
    return socket.socket(fileno=fds[0]), pid


def start_with_pid(wanted, uid, groups):
    """A process of `uid` with `groups` that has pid `wanted` (a pid just freed), asleep until
    killed; None when other processes kept taking the pid."""
    for _ in range(50):
        ready_read, ready_write = os.pipe()
        with open(NS_LAST_PID, "w") as f:
            f.write(str(wanted - 1))
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_read)
                become(uid, groups)
                os.write(ready_write, b"x")
                while True:
                    signal.pause()
            finally:
                os._exit(0)
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            ready.read(1)  # it has its uid and groups
        if pid == wanted:
            return pid
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return None


def end_process(pid):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@unittest.skipUnless(CAN_ADD_USERS and can_choose_pids(),
                     f"needs root, groupadd and a writable {NS_LAST_PID} (to reuse a pid on purpose)")
class IdentityTest(ThrowawayUsers, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.admins = cls.add_group(f"gpt_admins_{secrets.token_hex(3)}")

    def test_a_reused_pid_lends_its_groups_to_nobody(self):
        admin_gid = grp.getgrnam(self.admins).gr_gid
        with Daemon(config=f'admin_group = "{self.admins}"\n', mode=0o755) as d:
            job = d.enqueue(["sleep", "600"], uid=VICTIM)
            d.wait_state(job, "running")
            # The daemon stalls (as under a long answer) while the attacker connects, asks to cancel
            # the victim's job and exits; its pid goes to an administrator's process before the
            # daemon gets to the connection.
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                connection, attacker_pid = connect_as(ATTACKER, d.socket)
                self.addCleanup(connection.close)
                impostor = start_with_pid(attacker_pid, IMPOSTOR, [admin_gid])
                if impostor is None:
                    self.skipTest(f"pid {attacker_pid} was taken by other processes 50 times")
                self.addCleanup(end_process, impostor)
                with open(f"/proc/{impostor}/status") as f:
                    self.assertIn(f"Groups:\t{admin_gid}", f.read(), "the precondition: the pid is an admin's")
                lines = connection.makefile("rwb")
                lines.write(b'{"hello":"gpupool","protocol":1,"software":"attack","user":""}\n')
                lines.write(f'{{"op":"cancel","ids":[{job}]}}\n'.encode())
                lines.flush()
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            connection.settimeout(30)
            hello = lines.readline()
            answer = lines.readline().decode()
            self.assertTrue(hello, "the daemon answered the connection")
            self.assertIn("error", answer, f"the attacker cancelled another user's job: {answer}")
            self.assertEqual(d.job_state(job), "running")


class AnswersTest(unittest.TestCase):
    """Answers stay bounded whatever a request repeats or how long the jobs' commands are."""

    def test_a_wait_answers_each_job_once_and_within_the_message_limit(self):
        with Daemon() as d:
            long_word = "x" * 900_000  # a request may be up to 1 MiB
            first = d.enqueue(["true", long_word])
            second = d.enqueue(["true", long_word])
            d.finish(first, second)
            started = time.monotonic()
            with RawConnection(d.socket, timeout=60) as connection:
                connection.send({"op": "wait", "ids": [first, second] * 50_000})
                line = connection.receive()
            took = time.monotonic() - started
            started = time.monotonic()
            self.assertIsNotNone(d.status())
            after = time.monotonic() - started
            # The attack's figures (docs/security.md).
            print(f"\n  figure: wait for 100,000 ids of two jobs with 900 KB commands: a {len(line) >> 10} KiB answer "
                  f"in {took * 1000:.1f} ms; daemon VmRSS {rss_kib(d.proc.pid) / 1024:.1f} MiB; a status request "
                  f"right after {after * 1000:.1f} ms", flush=True)
            self.assertLess(len(line), 1 << 20, "the answer is longer than a message may be")
            answer = json.loads(line)
            self.assertEqual([job["id"] for job in answer["jobs"]], [first, second])
            self.assertEqual(answer["jobs"][0]["command"], ["true", long_word])
            self.assertNotIn(long_word, answer["jobs"][1].get("command", []), "the second command fits no more")

    def test_a_wait_for_more_jobs_than_a_page_is_refused_in_one_line(self):
        with Daemon() as d:
            with RawConnection(d.socket, timeout=60) as connection:
                answer = connection.exchange({"op": "wait", "ids": list(range(1, 1002))})
            self.assertEqual(answer["error"], "wait takes at most 1000 jobs at a time, not 1001")


class ResetTest(unittest.TestCase):
    def test_ids_do_not_repeat_after_the_database_is_deleted(self):
        with Daemon() as d:
            first = d.enqueue(["sh", "-c", "echo first"])
            d.finish(first)
            log = d.show(first)["stdout"]
            self.assertTrue(os.path.exists(log), "the precondition: the first job left its log")
            self.assertEqual(d.stop(), 0)
            for suffix in ("", "-wal", "-shm"):
                path = os.path.join(d.state_dir, "gpupool.db" + suffix)
                if os.path.exists(path):
                    os.unlink(path)
            d.start()
            second = d.enqueue(["sh", "-c", "echo second"])
            self.assertGreater(second, first)
            shown = d.finish(second)[0]
            self.assertEqual(shown["state"], "done", shown["reason"])
            with open(log) as f:
                self.assertEqual(f.read(), "first\n", "the old job's log was reused")

    def test_a_file_left_under_a_new_jobs_log_name_is_not_given_to_it(self):
        with Daemon(mode=0o755) as d:
            first = d.enqueue(["true"], uid=VICTIM, cwd="/")
            self.assertEqual(d.finish(first)[0]["state"], "done")
            # What a reset leaves, or an administrator puts there: root's, under the next job's log.
            planted = os.path.join(d.state_dir, "logs", f"{first + 1}.out")
            with open(planted, "w") as f:
                f.write("an earlier job's secret\n")
            os.chmod(planted, 0o640)
            before = os.stat(planted)
            second = d.enqueue(["sh", "-c", "echo mine"], uid=VICTIM, cwd="/")
            self.assertEqual(second, first + 1, "the precondition: the new job's log takes the planted name")
            shown = d.finish(second)[0]
            self.assertEqual(shown["state"], "failed")
            self.assertIn(f"could not start: {planted} is not this job's log", shown["reason"])
            after = os.stat(planted)
            self.assertEqual((after.st_uid, after.st_gid, after.st_mode, after.st_nlink),
                             (before.st_uid, before.st_gid, before.st_mode, 1))
            with open(planted) as f:
                self.assertEqual(f.read(), "an earlier job's secret\n")
            # Nor can its owner read it as the job's log.
            with self.assertRaisesRegex(AssertionError, "is not this job's log"):
                request_as(d, VICTIM, {"op": "logs", "id": second, "open": "stdout"})


if __name__ == "__main__":
    main()
