#!/usr/bin/env python3
"""The layering test's own test: a small tree with one of each mistake, each of which it must
name, and a clean tree it must pass."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'check_layers.py')


class CheckLayersTest(unittest.TestCase):
    def tree(self, files, layers):
        root = tempfile.mkdtemp()
        for path, text in files.items():
            os.makedirs(os.path.join(root, 'src', os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, 'src', path), 'w') as out:
                out.write(text)
        with open(os.path.join(root, 'layers.txt'), 'w') as out:
            out.write(layers)
        args = [sys.executable, CHECK, os.path.join(root, 'src'), os.path.join(root, 'layers.txt')]
        return subprocess.run(args, capture_output=True, text=True)

    LAYERS = ('base:  | tests:  | mains: \n'
              'os: base | tests:  | mains: \n'
              'app: base;os | tests:  | mains: \n')

    def test_a_clean_tree_passes(self):
        result = self.tree({'base/a.h': '', 'os/b.cc': '#include "base/a.h"\nint f() { return getpid(); }\n',
                            'app/c.cc': '#include "os/b.h"\n', 'os/b.h': ''}, self.LAYERS)
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertIn('0 problem(s)', result.stdout)

    def test_an_upward_include_fails(self):
        result = self.tree({'base/a.h': '#include "os/b.h"\n', 'os/b.h': ''}, self.LAYERS)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn('src/base/a.h:1: includes "os/b.h", but base may not use os', result.stdout)

    def test_a_missing_header_fails(self):
        result = self.tree({'app/c.cc': '#include "os/gone.h"\n', 'os/b.h': '', 'base/a.h': ''}, self.LAYERS)
        self.assertIn('includes "os/gone.h", which does not exist', result.stdout)

    def test_a_cycle_fails(self):
        layers = 'a: b | tests:  | mains: \nb: a | tests:  | mains: \n'
        result = self.tree({'a/x.h': '', 'b/y.h': ''}, layers)
        self.assertIn('a cycle among the libraries: a -> b -> a', result.stdout)

    def test_an_undeclared_folder_and_a_shared_name_fail(self):
        result = self.tree({'base/a.h': '', 'os/a.h': '', 'extra/z.h': ''}, self.LAYERS)
        self.assertIn('src/extra: not a library', result.stdout)
        self.assertIn('a.h: in src/base, src/os; names must be unique', result.stdout)

    def test_a_system_call_outside_os_fails_but_not_a_declaration_or_a_comment(self):
        code = ('// getenv("X") in a comment\n'
                'Result<int> open(const char* path);\n'
                'const char* s = "kill(1)";\n'
                'int f() { return std::getenv("HOME") != nullptr; }\n'
                'int g() { return ::close(3) + environ_size(); }\n'
                'char** e = environ;\n'
                'bool h(int fd) { return fd > 0 && isatty(fd); }\n')
        result = self.tree({'app/c.cc': code, 'base/a.h': '', 'os/b.h': ''}, self.LAYERS)
        problems = [line for line in result.stdout.splitlines() if line.startswith('src/')]
        self.assertEqual(problems, ['src/app/c.cc:4: calls getenv() outside src/os (put it behind an interface there)',
                                    'src/app/c.cc:5: calls close() outside src/os (put it behind an interface there)',
                                    'src/app/c.cc:6: reads environ outside src/os (use os/environment)',
                                    'src/app/c.cc:7: calls isatty() outside src/os (put it behind an interface there)'])


if __name__ == '__main__':
    unittest.main()
