#include "python/native/torch_snapshot.h"

#include <string>

#include "snapshot/pytorch_pickle_writer.h"

namespace memsnap::pytorch {
namespace py = pybind11;

py::dict to_torch_snapshot(const Snapshot& snapshot) {
  std::string pickled;
  {
    py::gil_scoped_release unlocked;
    pickled = to_pytorch_pickle(snapshot);
  }
  return py::module_::import("pickle").attr("loads")(py::bytes(pickled));
}

}  // namespace memsnap::pytorch
