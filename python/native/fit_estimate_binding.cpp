#include "python/native/fit_estimate_binding.h"

#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "allocator/allocator_config.h"
#include "snapshot/snapshot_loader.h"
#include "viewer/byte_text.h"
#include "viewer/fit_estimate.h"

namespace memsnap::pytorch {
namespace py = pybind11;

void add_fit_estimate_functions(py::module_& module) {
  module.def(
      "fit_estimate",
      [](py::bytes data, uint64_t capacity_bytes, const std::string& capacity_source,
         std::optional<std::string> settings, bool tune) {
        const std::string_view bytes = data;
        std::pair<std::string, std::string> out;
        {
          py::gil_scoped_release unlocked;
          Result<LoadedSnapshot> loaded = load_snapshot_from_memory(bytes);
          if (!loaded) throw std::invalid_argument("memsnap.estimate: " + loaded.error());
          FitOptions options;
          options.capacity_bytes = capacity_bytes;
          options.capacity_source = capacity_source;
          options.settings = std::move(settings);
          options.tune = tune;
          Result<FitEstimate> estimate = estimate_fit(loaded->snapshot, options);
          if (!estimate) throw std::invalid_argument("memsnap.estimate: " + estimate.error());
          out = {fit_estimate_to_json(estimate.value()).dump(), fit_estimate_to_text(estimate.value())};
        }
        return py::make_tuple(out.first, out.second);
      },
      py::arg("data"), py::arg("capacity_bytes"), py::arg("capacity_source"), py::arg("settings"), py::arg("tune"));
  module.def("check_allocator_settings", [](const std::string& settings) {
    Result<AllocatorConfig> parsed = parse_allocator_config(settings);
    if (!parsed) throw std::invalid_argument("settings: " + parsed.error());
  });
  module.def("format_bytes", [](int64_t bytes) { return format_bytes(bytes); });
  module.def("device_preset", [](const std::string& name) {
    Result<DevicePreset> preset = find_device_preset(name);
    if (!preset) throw std::invalid_argument(preset.error());
    return py::make_tuple(preset->capacity_bytes(), preset->name + ": " + text::bytes(preset->total_bytes) + " less " +
                                                        text::bytes(preset->context_bytes) + " for the CUDA context, " +
                                                        preset->measured);
  });
}

}  // namespace memsnap::pytorch
