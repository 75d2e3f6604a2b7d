// Every file memsnap writes (snapshots, SVGs, JSON, converted files) appears whole under its
// name or not at all, and never by replacing what it should not:
// - the bytes go to a temporary file created exclusively (O_CREAT|O_EXCL: never through a link
//   planted at its name, even in a shared folder such as /tmp) in the folder of the file it
//   replaces, then renamed over it; the new file keeps a replaced file's permissions;
// - what is not a regular file is never replaced: a FIFO, a terminal, a socket or a device
//   such as /dev/null or /dev/full is written through (as a shell's `>` would), a directory is
//   refused;
// - a symbolic link to a regular file stays a link: the file it leads to is replaced, and only
//   when the kernel lets this process open that file for writing through the link (so
//   fs.protected_symlinks still guards links planted in sticky folders); a link to nothing is
//   refused;
// - a temporary file left by a writer that was killed (its name holds the host and process
//   id) is removed by the next write to the same name once that process is gone.
// The folder and the path are checked, and the temporary file made, by create(): before the
// work that makes the bytes, so a bad path fails at once instead of after minutes of work.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "allocator/result.h"

namespace memsnap {

class OutputFile {
 public:
  static Result<OutputFile> create(const std::string& path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();  // an unfinished file's temporary is removed; the destination is untouched

  // Appends `piece`. After a failed write the later pieces are dropped and finish() says why.
  void write(std::string_view piece);
  // Puts the file in place (renames the temporary over the destination, or closes what was
  // written through). A one-line error, naming the path and the reason, on failure.
  std::optional<std::string> finish();

  const std::string& path() const { return path_; }
  bool writes_through() const { return temporary_.empty(); }

 private:
  OutputFile() = default;

  std::string path_;         // as asked
  std::string destination_;  // what the temporary file is renamed to (a link's file)
  std::string temporary_;    // empty when writing through to a FIFO, device or terminal
  int fd_ = -1;              // -1 once finished
  std::optional<std::string> error_;  // the first failed write
};

// Why a file could not be written at `path` now (its folder is missing or not writable, or the
// path is a directory or a link to nothing), without creating anything; nullopt if it could.
// For settings that name where a file will be written later (an out-of-memory snapshot).
std::optional<std::string> output_path_problem(const std::string& path);

}  // namespace memsnap
