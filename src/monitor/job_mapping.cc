#include "monitor/job_mapping.h"

#include <fmt/format.h>

#include "os/files.h"

namespace gpupool {
namespace {

// Where a file is written before it is renamed into place: dcgm-exporter reads every file of the
// directory, and skips directories.
constexpr const char* kTempDir = ".gpupool-tmp";

// A name this directory's writer uses for a MIG GPU instance: "2.3".
bool is_mig_file_name(const std::string& name) {
  size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return false;
  return name.find_first_not_of("0123456789.") == std::string::npos && name.find('.', dot + 1) == std::string::npos;
}

// Removes the file; one someone removed already is as good.
Result<void> remove_gone(const std::string& path) {
  Result<void> removed = remove_file(path);
  if (!removed && !file_status(path)) return {};
  return removed;
}

}  // namespace

std::map<std::string, std::string> job_mapping_files(const std::vector<RunningJob>& running, size_t gpu_count) {
  std::map<std::string, std::string> files;
  for (size_t gpu = 0; gpu < gpu_count; ++gpu) files[std::to_string(gpu)];
  for (const RunningJob& job : running) {
    for (unsigned gpu : job.gpus) {
      std::string name = job.mig_gpu_instance ? fmt::format("{}.{}", gpu, *job.mig_gpu_instance) : std::to_string(gpu);
      files[name] += fmt::format("{}\n", job.id);
    }
  }
  return files;
}

Result<void> JobMappingDirectory::update(const std::map<std::string, std::string>& files) {
  const std::string temp_dir = dir_ + "/" + kTempDir;
  if (!written_) {
    TRY(make_directories(temp_dir, 0755));
    // An earlier daemon stopped between writing a file and renaming it into place.
    TRY_ASSIGN(std::vector<std::string> drafts, directory_entries(temp_dir));
    for (const std::string& name : drafts) TRY(remove_gone(temp_dir + "/" + name));
    written_.emplace();
    // What an earlier daemon left for MIG instances whose jobs have ended since.
    TRY_ASSIGN(std::vector<std::string> entries, directory_entries(dir_));
    for (const std::string& name : entries) {
      if (is_mig_file_name(name) && !files.contains(name)) TRY(remove_gone(dir_ + "/" + name));
    }
  }
  for (const auto& [name, text] : files) {
    auto old = written_->find(name);
    if (old != written_->end() && old->second == text) continue;
    TRY(replace_file(dir_ + "/" + name, text, 0644, temp_dir));
    (*written_)[name] = text;
  }
  for (auto it = written_->begin(); it != written_->end();) {
    if (files.contains(it->first)) {
      ++it;
      continue;
    }
    TRY(remove_gone(dir_ + "/" + it->first));
    it = written_->erase(it);
  }
  return {};
}

}  // namespace gpupool
