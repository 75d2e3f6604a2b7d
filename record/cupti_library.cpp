#include "record/cupti_library.h"

#include <dlfcn.h>
#include <link.h>

#include <string_view>
#include <vector>

namespace memsnap {
namespace {

constexpr std::string_view kNames[] = {"libcupti.so.13", "libcupti.so"};

// Folders of the CUDA libraries this process has loaded, and their toolkit's CUPTI folders.
int collect_cuda_folders(dl_phdr_info* info, size_t, void* data) {
  auto& folders = *static_cast<std::vector<std::string>*>(data);
  const std::string_view path = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return 0;
  const std::string_view name = path.substr(slash + 1);
  if (!name.starts_with("libcudart") && !name.starts_with("libcublas") && !name.starts_with("libnvrtc") &&
      !name.starts_with("libcuda.so") && !name.starts_with("libnvJitLink"))
    return 0;
  const std::string folder(path.substr(0, slash));
  folders.push_back(folder);
  folders.push_back(folder + "/../extras/CUPTI/lib64");
  return 0;
}

std::vector<std::string> candidates(const std::string& given_path) {
  if (!given_path.empty()) return {given_path};
  std::vector<std::string> out(std::begin(kNames), std::end(kNames));
  std::vector<std::string> folders;
  dl_iterate_phdr(collect_cuda_folders, &folders);
  for (const char* folder : {"/usr/local/cuda/lib64", "/usr/local/cuda/extras/CUPTI/lib64",
                             "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda-13/lib64",
                             "/usr/local/cuda-13/extras/CUPTI/lib64"})
    folders.emplace_back(folder);
  for (const std::string& folder : folders)
    for (std::string_view name : kNames) out.push_back(folder + "/" + std::string(name));
  return out;
}

template <typename Function>
bool bind(void* handle, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
  return function != nullptr;
}

}  // namespace

std::string CuptiLibrary::describe(CUptiResult result) const {
  const char* text = nullptr;
  if (get_result_string != nullptr && get_result_string(result, &text) == CUPTI_SUCCESS && text != nullptr)
    return text;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

Result<CuptiLibrary> load_cupti(const std::string& given_path) {
  std::string last_error;
  for (const std::string& path : candidates(given_path)) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      if (!given_path.empty()) last_error = error != nullptr ? error : "cannot load it";
      continue;
    }
    CuptiLibrary library;
    library.path = path;
    if (bind(handle, "cuptiSubscribe", library.subscribe) &&
        bind(handle, "cuptiUnsubscribe", library.unsubscribe) &&
        bind(handle, "cuptiEnableCallback", library.enable_callback) &&
        bind(handle, "cuptiGetResultString", library.get_result_string) &&
        bind(handle, "cuptiGetDeviceId", library.get_device_id))
      return library;
    last_error = path + " lacks the callback API";
    dlclose(handle);
  }
  if (!given_path.empty()) return Result<CuptiLibrary>::failure("cannot load CUPTI from " + given_path + ": " + last_error);
  return Result<CuptiLibrary>::failure(
      "cannot find CUPTI (libcupti.so.13) on the loader's path, beside the program's CUDA libraries "
      "or under /usr/local/cuda; give its path with --cupti" +
      (last_error.empty() ? std::string() : " (" + last_error + ")"));
}

}  // namespace memsnap
