// memsnap._native's side of memsnap.estimate: a captured trace replayed on a device of a given
// size (viewer/fit_estimate.h), for Python.
#pragma once

#include <pybind11/pybind11.h>

namespace memsnap::pytorch {

// Adds fit_estimate(data, capacity_bytes, capacity_source, settings, tune) -> (json, text) and
// device_preset(name) -> (capacity_bytes, source), check_allocator_settings(text) (ValueError when
// PYTORCH_CUDA_ALLOC_CONF's grammar refuses it) and format_bytes(n) -> "1.50 GiB" to the module.
void add_fit_estimate_functions(pybind11::module_& module);

}  // namespace memsnap::pytorch
