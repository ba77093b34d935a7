"""The command lines people type every day: gpupool's options end at the program's first word or
at `--`, and everything after belongs to the program, byte for byte (README, "Commands")."""
import unittest

from harness import Daemon, gpupool, main, one_line


class ProgramWordsTest(unittest.TestCase):
    def test_run_leaves_the_programs_options_to_it(self):
        proc = gpupool("run", "-q", "--wait", "10m", "--", "echo", "train.py", "--name", "3")
        self.assertEqual(proc.stdout, "train.py --name 3\n")
        proc = gpupool("run", "-q", "--name", "mine", "echo", "--wait", "--", "-g", "2")
        self.assertEqual(proc.stdout, "--wait -- -g 2\n", "without --, the program's first word ends ours")

    def test_an_optional_value_does_not_swallow_the_separator(self):
        proc = gpupool("launch", "-g", "2", "--wait", "--", "sh", "-c", 'echo "$0"', "-v")
        self.assertEqual(sorted(proc.stdout.splitlines()), ["[rank 0] -v", "[rank 1] -v"], proc.stderr)

    def test_a_command_is_required_and_unknown_options_are_usage_errors(self):
        for args in (["run", "-q"], ["run", "--bogus", "true"], ["launch", "--"], ["submit", "-g", "1"]):
            with self.subTest(args=args):
                proc = gpupool(*args, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertTrue(one_line(proc), proc.stderr)

    def test_submit_stores_the_program_as_typed(self):
        with Daemon() as d:
            plain = d.submit("echo", "train.py", "--name", "x")
            separated = d.submit("--name", "mine", "--", "echo", "--", "--hold")
            shown = d.show(plain)
            self.assertEqual(shown["command"], ["echo", "train.py", "--name", "x"])
            self.assertNotEqual(shown["name"], "x")
            shown = d.show(separated)
            self.assertEqual((shown["name"], shown["command"]), ("mine", ["echo", "--", "--hold"]))
            self.assertEqual([job["state"] for job in d.finish(plain, separated)], ["done", "done"])
            self.assertEqual(d.gp("logs", str(plain), check=True).stdout, "train.py --name x\n")


if __name__ == "__main__":
    main()
