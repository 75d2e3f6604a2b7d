#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "cli/command.h"

namespace memsnap::cli {

OutputWriter::OutputWriter(const std::string& path) : path_(path) {
  if (path.empty() || path == "-") return;
  temporary_ = path + ".tmp." + std::to_string(::getpid());
  file_.open(temporary_, std::ios::binary | std::ios::trunc);
  if (!file_) throw CommandError(path + ": cannot create file");
}

OutputWriter::~OutputWriter() {
  if (temporary_.empty()) return;
  file_.close();
  std::remove(temporary_.c_str());
}

void OutputWriter::write(std::string_view text) {
  if (temporary_.empty()) {
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!std::cout) throw CommandError("cannot write to standard output");
    return;
  }
  file_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!file_) throw CommandError(path_ + ": write failed");
}

void OutputWriter::finish() {
  if (temporary_.empty()) {
    std::cout << std::flush;
    if (!std::cout) throw CommandError("cannot write to standard output");
    return;
  }
  file_.flush();
  if (!file_) throw CommandError(path_ + ": write failed");
  file_.close();
  std::error_code error;
  std::filesystem::rename(temporary_, path_, error);
  if (error) throw CommandError(path_ + ": " + error.message());  // the destructor removes it
  temporary_.clear();
}

void write_output(const std::string& path, const std::string& text) {
  OutputWriter out(path);
  out.write(text);
  out.finish();
}

}  // namespace memsnap::cli
