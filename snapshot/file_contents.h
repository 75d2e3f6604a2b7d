// Reads a whole input file into memory, refusing files larger than the caller allows before
// allocating anything, with one-line errors that name the path.
#pragma once

#include <cstddef>
#include <string>

#include "allocator/result.h"

namespace memsnap {

Result<std::string> read_file_contents(const std::string& path, size_t max_bytes);

}  // namespace memsnap
