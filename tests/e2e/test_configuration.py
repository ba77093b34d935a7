"""gpupoold's configuration: docs/configuration.md documents exactly the keys the parser knows,
packaging/gpupool.toml (the installed default) lists them all and is the page's example, every
example value in it is valid, and `gpupoold --check-config` answers in one line."""
import os
import re
import subprocess
import tempfile
import unittest

from harness import GPUPOOLD, SOURCE_DIR, clean_env, main

DOCS = os.path.join(SOURCE_DIR, "docs", "configuration.md")
SHIPPED = os.path.join(SOURCE_DIR, "packaging", "gpupool.toml")
TABLES_WITH_KEYS = ("daemon", "scheduler", "monitor")  # [quotas] takes any user name


def check_config(text):
    """gpupoold --check-config on TEXT: (exit status, stdout, stderr, the file's path)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        proc = subprocess.run([GPUPOOLD, "--check-config", "--config", f.name], env=clean_env(),
                              capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr, f.name
    finally:
        os.unlink(f.name)


def keys_by_table(path, heading, entry, end=None):
    """{table: {key}} from a file: lines matching `heading` start a table (group 1 its name),
    lines matching `entry` within one name a key (group 1), a line matching `end` ends it."""
    keys, table = {}, None
    with open(path) as f:
        for line in f:
            if match := re.match(heading, line):
                table = match.group(1)
                keys[table] = set()
            elif end and re.match(end, line):
                table = None
            elif table and (match := re.match(entry, line)):
                keys[table].add(match.group(1))
    return keys


def documented_keys():
    """{table: {key}} from the tables of docs/configuration.md."""
    return keys_by_table(DOCS, r"### \[(\w+)\]", r"\| `(\w+)` \|", end=r"## ")


def shipped_keys():
    """{table: {key}} from the commented-out settings of packaging/gpupool.toml."""
    return keys_by_table(SHIPPED, r"\[(\w+)\]", r'#"?([\w.]+)"? = ')


def parser_keys(table):
    """The keys the parser knows in [table], from its answer to an unknown one."""
    status, _, stderr, _ = check_config(f"[{table}]\nno_such_key = 1\n")
    known = re.search(r"unknown key 'no_such_key' in \[\w+\] \(known: ([^)]*)\)", stderr)
    if status != 1 or not known:
        raise AssertionError(f"unexpected answer to an unknown key in [{table}]: {status} {stderr!r}")
    return set(known.group(1).split(", "))


class ConfigurationTest(unittest.TestCase):
    def test_the_page_documents_exactly_the_keys_the_parser_knows(self):
        documented = documented_keys()
        status, _, stderr, _ = check_config("[no_such_table]\n")
        tables = re.search(r"unknown table 'no_such_table' \(known: ([^)]*)\)", stderr)
        self.assertEqual(status, 1)
        self.assertEqual(set(tables.group(1).split(", ")), set(documented), stderr)
        for table in TABLES_WITH_KEYS:
            with self.subTest(table=table):
                self.assertEqual(documented[table], parser_keys(table))

    def test_the_shipped_file_lists_every_key_and_is_the_pages_example(self):
        shipped = shipped_keys()
        documented = documented_keys()
        for table in TABLES_WITH_KEYS:
            with self.subTest(table=table):
                self.assertEqual(shipped.get(table), documented[table])
        with open(DOCS) as f:
            example = re.search(r"## Example.*?```toml\n(.*?)```", f.read(), re.S).group(1)
        with open(SHIPPED) as f:
            self.assertEqual(example, f.read(), "docs/configuration.md's example differs from packaging/gpupool.toml")

    def test_every_example_value_in_the_shipped_file_is_valid(self):
        with open(SHIPPED) as f:
            uncommented = re.sub(r'(?m)^#("?[\w.]+"? = )', r"\1", f.read())
        # The check looks the administrators' group up, as start-up does: one every system has.
        uncommented = re.sub(r'(?m)^admin_group = .*$', 'admin_group = "root"', uncommented)
        self.assertNotIn("\n#" + "policy = ", uncommented)
        status, stdout, stderr, path = check_config(uncommented)
        self.assertEqual((status, stdout, stderr), (0, f"{path}: OK\n", ""))
        status, stdout, stderr, path = check_config(open(SHIPPED).read())
        self.assertEqual((status, stdout), (0, f"{path}: OK\n"))

    def test_a_bad_file_gets_one_line_naming_file_and_line(self):
        status, stdout, stderr, path = check_config("[scheduler]\npolicy = \"fifo\"\nquota_gpus = \"4\"\n")
        self.assertEqual(status, 1)
        self.assertEqual(stdout, "")
        self.assertEqual(stderr, f"gpupoold: {path}:3: 'quota_gpus' must be a number\n")

    def test_a_missing_admin_group_fails_the_check_as_it_would_fail_the_start(self):
        status, stdout, stderr, path = check_config('[daemon]\nadmin_group = "gpupool-no-such-group"\n')
        self.assertEqual((status, stdout), (1, ""))
        self.assertEqual(stderr, f"gpupoold: {path}: admin_group: group 'gpupool-no-such-group' does not exist\n")


if __name__ == "__main__":
    main()
