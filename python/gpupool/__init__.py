"""gpupool for Python: gpupoold's queue, and GPUs leased for the running process.

    import gpupool
    lease = gpupool.acquire(1)   # before torch touches CUDA
    import torch                 # sees exactly lease.uuids

docs/python.md in the gpupool source tree describes every function and the rules of acquire().
"""
from ._client import Client
from ._connection import Error, default_socket_path, runtime_directory
from ._lease import Lease, acquire
from ._version import VERSION as __version__

for _public in (Client, Error, Lease):
    _public.__module__ = "gpupool"  # tracebacks say gpupool.Error, not where it is defined

__all__ = ["Client", "Error", "Lease", "acquire", "default_socket_path", "runtime_directory", "__version__"]
