// gpupool-cuda-probe: asks the real CUDA driver which devices this process
// sees, and prints one JSON line. `gpupool resolve --driver` runs it in a
// child process per value, because the driver reads CUDA_VISIBLE_DEVICES
// once, at cuInit, and can never be asked again in the same process.
//
// Own declarations of the few driver entry points used (libcuda is loaded
// with dlopen so that the probe builds and runs where no CUDA toolkit is).
#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace {

using CuResult = int;
using CuDevice = int;
struct CuUuid {
  unsigned char bytes[16];
};

constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrMultiprocessorCount = 16;

struct Driver {
  CuResult (*init)(unsigned) = nullptr;
  CuResult (*driver_get_version)(int*) = nullptr;
  CuResult (*device_get_count)(int*) = nullptr;
  CuResult (*device_get)(CuDevice*, int) = nullptr;
  CuResult (*device_get_uuid)(CuUuid*, CuDevice) = nullptr;
  CuResult (*device_get_pci_bus_id)(char*, int, CuDevice) = nullptr;
  CuResult (*device_get_name)(char*, int, CuDevice) = nullptr;
  CuResult (*device_get_attribute)(int*, int, CuDevice) = nullptr;
  CuResult (*get_error_name)(CuResult, const char**) = nullptr;
};

template <typename Fn>
bool load(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  return out != nullptr;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string error_name(const Driver& d, CuResult rc) {
  const char* name = nullptr;
  if (d.get_error_name != nullptr && d.get_error_name(rc, &name) == 0 && name != nullptr) return name;
  return "CUDA_ERROR_" + std::to_string(rc);
}

std::string format_uuid(const CuUuid& u) {
  char buf[64];
  const unsigned char* b = u.bytes;
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

}  // namespace

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("{\"error\":\"no_driver\",\"detail\":\"%s\"}\n", json_escape(dlerror()).c_str());
    return 3;
  }
  Driver d;
  bool ok = load(lib, "cuInit", d.init) && load(lib, "cuDeviceGetCount", d.device_get_count) &&
            load(lib, "cuDeviceGet", d.device_get) &&
            load(lib, "cuDeviceGetPCIBusId", d.device_get_pci_bus_id) &&
            load(lib, "cuDeviceGetName", d.device_get_name) &&
            load(lib, "cuDeviceGetAttribute", d.device_get_attribute);
  if (!load(lib, "cuDeviceGetUuid_v2", d.device_get_uuid)) ok = ok && load(lib, "cuDeviceGetUuid", d.device_get_uuid);
  load(lib, "cuGetErrorName", d.get_error_name);
  load(lib, "cuDriverGetVersion", d.driver_get_version);
  if (!ok) {
    std::printf("{\"error\":\"missing_symbol\"}\n");
    return 3;
  }
  int version = 0;
  if (d.driver_get_version != nullptr) d.driver_get_version(&version);
  CuResult rc = d.init(0);
  if (rc != 0) {
    std::printf("{\"driver_version\":%d,\"init\":\"%s\",\"devices\":[]}\n", version,
                error_name(d, rc).c_str());
    return 0;
  }
  int count = 0;
  rc = d.device_get_count(&count);
  if (rc != 0) {
    std::printf("{\"driver_version\":%d,\"init\":\"CUDA_SUCCESS\",\"count_error\":\"%s\",\"devices\":[]}\n",
                version, error_name(d, rc).c_str());
    return 0;
  }
  std::string out = "{\"driver_version\":" + std::to_string(version) +
                    ",\"init\":\"CUDA_SUCCESS\",\"devices\":[";
  for (int i = 0; i < count; ++i) {
    CuDevice dev = 0;
    CuUuid uuid{};
    char pci[64] = {};
    char name[256] = {};
    int major = 0, minor = 0, sms = 0;
    if (d.device_get(&dev, i) != 0) continue;
    d.device_get_uuid(&uuid, dev);
    d.device_get_pci_bus_id(pci, sizeof pci, dev);
    d.device_get_name(name, sizeof name, dev);
    d.device_get_attribute(&major, kAttrComputeCapabilityMajor, dev);
    d.device_get_attribute(&minor, kAttrComputeCapabilityMinor, dev);
    d.device_get_attribute(&sms, kAttrMultiprocessorCount, dev);
    if (i > 0) out += ",";
    out += "{\"cuda_index\":" + std::to_string(i) + ",\"uuid\":\"" + format_uuid(uuid) +
           "\",\"pci_bus_id\":\"" + json_escape(pci) + "\",\"name\":\"" + json_escape(name) +
           "\",\"compute_capability\":\"" + std::to_string(major) + "." + std::to_string(minor) +
           "\",\"multiprocessors\":" + std::to_string(sms) + "}";
  }
  out += "]}";
  std::puts(out.c_str());
  return 0;
}
