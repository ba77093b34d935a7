"""The scheduler's regression gate: the gpupool policy replayed on a real cluster trace (the first
3,000 jobs of Alibaba's GPU-sharing trace, fitted to hgx-h200 by `gpupool sim import`, and the
held-out rest) and on a generated one, as configured by default and with backfill by suspending,
must do no worse than the results recorded in tests/data/traces/gate-bounds.json.
Replays are deterministic, so the tolerance only absorbs floating-point noise between builds."""
import json
import os
import unittest

from harness import main
from test_sim import TRACES, sim


class TraceGateTest(unittest.TestCase):
    def test_the_policy_does_no_worse_than_recorded(self):
        with open(os.path.join(TRACES, "gate-bounds.json")) as f:
            gate = json.load(f)
        tolerance = gate["tolerance"]
        for run, bounds in gate["runs"].items():
            summary = json.loads(sim("replay", "--machine", gate["machine"], "--policy", gate["policy"],
                                     "--trace", os.path.join(TRACES, bounds["trace"]), *bounds["args"],
                                     "--json").stdout)
            for metric, bound in bounds["at_most"].items():
                with self.subTest(run=run, metric=metric):
                    self.assertLessEqual(summary[metric], bound * (1 + tolerance),
                                         f"{metric} got worse than the recorded {bound}")
            for metric, bound in bounds["at_least"].items():
                with self.subTest(run=run, metric=metric):
                    self.assertGreaterEqual(summary[metric], bound * (1 - tolerance),
                                            f"{metric} got worse than the recorded {bound}")


if __name__ == "__main__":
    main()
