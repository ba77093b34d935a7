// A shared library loaded at run time (dlopen), and the addresses of what it exports.
#pragma once

#include <string>

#include "base/result.h"

namespace gpupool {

// Never unloaded: its code may run (threads it started, handlers it installed) until the process
// ends, and unloading a driver library costs time for nothing at exit.
class SharedLibrary {
 public:
  // Lazy binding, its symbols kept to itself (RTLD_LOCAL). The error is the loader's own line,
  // e.g. "libnvidia-ml.so.1: cannot open shared object file: No such file or directory".
  static Result<SharedLibrary> load(const std::string& name);
  // nullptr when the library exports nothing of that name.
  void* symbol(const char* name) const;

 private:
  explicit SharedLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

}  // namespace gpupool
