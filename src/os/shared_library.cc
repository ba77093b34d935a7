#include "os/shared_library.h"

#include <dlfcn.h>

namespace gpupool {

Result<SharedLibrary> SharedLibrary::load(const std::string& name) {
  dlerror();  // clears an earlier failure, so the one reported is this load's
  void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Error{why != nullptr ? why : "cannot load " + name};
  }
  return SharedLibrary(handle);
}

void* SharedLibrary::symbol(const char* name) const { return dlsym(handle_, name); }

}  // namespace gpupool
