#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "cli/command.h"

namespace memsnap::cli {

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw CommandError("cannot write to standard output");
    return;
  }
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw CommandError(path + ": cannot create file");
    out << text;
    out.flush();
    if (!out) {
      out.close();
      std::remove(temporary.c_str());
      throw CommandError(path + ": write failed");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    throw CommandError(path + ": " + error.message());
  }
}

}  // namespace memsnap::cli
