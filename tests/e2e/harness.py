"""Shared helpers for the end-to-end tests: run the built binaries on simulated machines."""
import json
import os
import subprocess
import unittest

BIN_DIR = os.environ.get("GPUPOOL_BIN_DIR", "build/dev/bin")
SOURCE_DIR = os.environ.get("GPUPOOL_SOURCE_DIR", ".")
GPUPOOL = os.path.join(BIN_DIR, "gpupool")
TEST_FIXTURES = os.path.join(SOURCE_DIR, "tests", "data", "fixtures")
SHIPPED_FIXTURES = ["dgx1-v100", "dgx-a100", "hgx-h200", "pcie-4gpu", "mixed-workstation", "h200-1"]


def clean_env(**overrides):
    """The environment of a user on the simulated machine, with nothing gpupool-specific leaking in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


def gpupool(*args, sim="hgx-h200", env=None, check=True, input=None):
    """Runs gpupool; returns the CompletedProcess (text mode)."""
    run_env = clean_env(GPUPOOL_SIM=sim, **(env or {}))
    proc = subprocess.run([GPUPOOL, *args], env=run_env, capture_output=True, text=True, input=input,
                          timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"gpupool {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def gpupool_json(*args, **kwargs):
    return json.loads(gpupool(*args, **kwargs).stdout)


def main():
    unittest.main()
