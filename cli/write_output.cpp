#include <iostream>

#include "cli/command.h"

namespace memsnap::cli {

OutputWriter::OutputWriter(const std::string& path) {
  if (path.empty() || path == "-") return;
  Result<OutputFile> file = OutputFile::create(path);
  if (!file) throw CommandError(file.error());
  file_.emplace(std::move(file.value()));
}

void OutputWriter::write(std::string_view text) {
  if (file_) {
    file_->write(text);
    return;
  }
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!std::cout) throw CommandError("cannot write to standard output");
}

void OutputWriter::finish() {
  if (file_) {
    if (std::optional<std::string> error = file_->finish()) throw CommandError(*error);
    return;
  }
  std::cout << std::flush;
  if (!std::cout) throw CommandError("cannot write to standard output");
}

}  // namespace memsnap::cli
