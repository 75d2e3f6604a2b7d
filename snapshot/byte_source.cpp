#include "snapshot/byte_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <stdexcept>
#include <utility>

namespace memsnap {
namespace {

constexpr size_t kChunkBytes = size_t{256} << 10;

bool starts_with_gzip_magic(const uint8_t* bytes, size_t size) {
  return size >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

}  // namespace

HeldBytes::~HeldBytes() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

HeldBytes::HeldBytes(HeldBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

HeldBytes& HeldBytes::operator=(HeldBytes&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void HeldBytes::append(const void* data, size_t n) {
  if (n == 0) return;
  if (n > capacity_ - size_) {
    // A quarter more each time (at least 1 MiB): the mapping never holds much more than the
    // bytes, and growing it copies nothing.
    constexpr size_t kStep = size_t{1} << 20;
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t wanted = std::max({size_ + n, capacity_ + capacity_ / 4, kStep});
    const size_t capacity = (wanted + page - 1) / page * page;
    void* grown = data_ == nullptr
                      ? ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : ::mremap(data_, capacity_, capacity, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED) throw std::bad_alloc();
    data_ = grown;
    capacity_ = capacity;
  }
  std::memcpy(static_cast<char*>(data_) + size_, data, n);
  size_ += n;
}

struct ByteSource::Inflater {
  z_stream stream{};
  std::vector<uint8_t> input;
  bool finished = false;
  Inflater() {
    // 15 + 32: a gzip or zlib header, detected automatically.
    if (inflateInit2(&stream, 15 + 32) != Z_OK) throw std::runtime_error("cannot start gzip decompression");
  }
  ~Inflater() { inflateEnd(&stream); }
};

ByteSource::ByteSource(uint64_t max_bytes) : max_bytes_(max_bytes) {}

ByteSource::~ByteSource() {
  mapped_.reset();
  if (fd_ >= 0) ::close(fd_);
}

bool ByteSource::skip(uint64_t n) {
  while (n > 0) {
    if (next_ == end_ && !refill()) return false;
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n, static_cast<uint64_t>(end_ - next_)));
    next_ += step;
    n -= step;
  }
  return true;
}

std::optional<std::string_view> ByteSource::whole() {
  if (offset() != 0 || pull_ || peek() < 0 || inflater_ != nullptr) return std::nullopt;
  if (fd_ < 0) {
    if (memory_.size() > max_bytes_ || starts_with_gzip_magic(reinterpret_cast<const uint8_t*>(memory_.data()), memory_.size()))
      return std::nullopt;
    return memory_;
  }
  if (mapped_ == nullptr) {
    if (size_hint_ == 0 || size_hint_ > max_bytes_) return std::nullopt;
    mapped_ = MappedFile::map(fd_, static_cast<size_t>(size_hint_));
    if (mapped_ == nullptr) return std::nullopt;  // the caller reads the file in chunks instead
  }
  return mapped_->bytes();
}

bool ByteSource::changed_while_read() const { return mapped_ != nullptr && mapped_->changed(); }

void ByteSource::release_whole(uint64_t begin, uint64_t end) const {
  if (mapped_ != nullptr) mapped_->release(begin, end);
}

Result<std::unique_ptr<ByteSource>> ByteSource::open_file(const std::string& path,
                                                           uint64_t max_bytes) {
  std::unique_ptr<ByteSource> source(new ByteSource(max_bytes));
  source->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd_ < 0)
    return Result<std::unique_ptr<ByteSource>>::failure(path + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(source->fd_, &info) != 0 || !S_ISREG(info.st_mode))
    return Result<std::unique_ptr<ByteSource>>::failure(path + ": not a regular file");
  if (static_cast<uint64_t>(info.st_size) > max_bytes)
    return Result<std::unique_ptr<ByteSource>>::failure(
        path + ": " + std::to_string(info.st_size) + " bytes is more than the limit of " +
        std::to_string(max_bytes));
  source->size_hint_ = static_cast<uint64_t>(info.st_size);
  return source;
}

std::unique_ptr<ByteSource> ByteSource::over_memory(std::string_view bytes, uint64_t max_bytes) {
  std::unique_ptr<ByteSource> source(new ByteSource(max_bytes));
  source->memory_ = bytes;
  source->size_hint_ = bytes.size();
  return source;
}

std::unique_ptr<ByteSource> ByteSource::over_pull(Pull pull, uint64_t size_hint, uint64_t max_bytes) {
  std::unique_ptr<ByteSource> source(new ByteSource(max_bytes));
  source->pull_ = std::move(pull);
  source->size_hint_ = size_hint;
  return source;
}

size_t ByteSource::fill_raw(uint8_t* out, size_t capacity) {
  if (pull_) {
    // At least two bytes at the start, where the gzip magic is looked for.
    const bool first = consumed_before_ == 0 && inflater_ == nullptr;
    size_t n = 0;
    do {
      const size_t got = std::min(pull_(out + n, capacity - n), capacity - n);
      if (got == 0) break;
      n += got;
    } while (first && n < 2);
    return n;
  }
  if (fd_ < 0) {
    const size_t n = std::min(capacity, memory_.size() - memory_offset_);
    std::memcpy(out, memory_.data() + memory_offset_, n);
    memory_offset_ += n;
    return n;
  }
  for (;;) {
    const ssize_t n = ::read(fd_, out, capacity);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
  }
}

bool ByteSource::refill() {
  consumed_before_ += static_cast<uint64_t>(end_ - begin_);
  begin_ = next_ = end_ = nullptr;
  if (consumed_before_ >= max_bytes_) {
    hit_limit_ = true;
    return false;
  }
  const bool first = consumed_before_ == 0 && inflater_ == nullptr;
  const bool in_memory = fd_ < 0 && !pull_;
  if (first && in_memory && starts_with_gzip_magic(reinterpret_cast<const uint8_t*>(memory_.data()), memory_.size()))
    size_hint_ = 0;
  if (first && in_memory && !starts_with_gzip_magic(reinterpret_cast<const uint8_t*>(memory_.data()), memory_.size())) {
    // Plain bytes in memory: read them where they lie.
    const size_t n = static_cast<size_t>(std::min<uint64_t>(memory_.size(), max_bytes_));
    begin_ = next_ = reinterpret_cast<const uint8_t*>(memory_.data());
    end_ = begin_ + n;
    memory_offset_ = memory_.size();
    if (n < memory_.size()) hit_limit_ = true;
    return n > 0;
  }
  // Bytes in memory read where they lie, or as gzip input, all taken: the end, with no
  // buffer to allocate (a part of a pickle read by another thread ends here).
  if (in_memory && memory_offset_ == memory_.size() && (inflater_ == nullptr || inflater_->finished)) return false;
  if (buffer_.empty()) buffer_.resize(kChunkBytes);
  size_t produced = 0;
  if (inflater_ == nullptr) {
    produced = fill_raw(buffer_.data(), buffer_.size());
    if (first && starts_with_gzip_magic(buffer_.data(), produced)) {
      size_hint_ = 0;  // the inflated size is unknown
      inflater_ = std::make_unique<Inflater>();
      inflater_->input.assign(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(produced));
      inflater_->stream.next_in = inflater_->input.data();
      inflater_->stream.avail_in = static_cast<uInt>(produced);
      produced = 0;
    }
  }
  if (inflater_ != nullptr) {
    Inflater& z = *inflater_;
    z.stream.next_out = buffer_.data();
    z.stream.avail_out = static_cast<uInt>(buffer_.size());
    while (z.stream.avail_out == buffer_.size() && !z.finished) {
      if (z.stream.avail_in == 0) {
        z.input.resize(kChunkBytes);
        const size_t n = fill_raw(z.input.data(), z.input.size());
        if (n == 0) throw std::runtime_error("gzip data ends early");
        z.stream.next_in = z.input.data();
        z.stream.avail_in = static_cast<uInt>(n);
      }
      const int status = inflate(&z.stream, Z_NO_FLUSH);
      if (status == Z_STREAM_END) {
        z.finished = !next_gzip_member();
      } else if (status != Z_OK) {
        throw std::runtime_error(std::string("damaged gzip data") +
                                 (z.stream.msg != nullptr ? std::string(": ") + z.stream.msg : ""));
      }
    }
    produced = buffer_.size() - z.stream.avail_out;
  }
  const uint64_t allowed = max_bytes_ - consumed_before_;
  if (produced > allowed) {
    produced = static_cast<size_t>(allowed);
    hit_limit_ = true;
  }
  begin_ = next_ = buffer_.data();
  end_ = begin_ + produced;
  return produced > 0;
}

bool ByteSource::next_gzip_member() {
  // As gzip and Python read them: members one after another, their data joined, with zero
  // bytes between or after them skipped. Anything else after the data is ignored.
  Inflater& z = *inflater_;
  auto more_input = [&](size_t keep) {
    // The `keep` bytes not yet taken move to the front, and more are read behind them.
    z.input.resize(kChunkBytes);
    std::memmove(z.input.data(), z.stream.next_in, keep);
    const size_t n = fill_raw(z.input.data() + keep, z.input.size() - keep);
    z.stream.next_in = z.input.data();
    z.stream.avail_in = static_cast<uInt>(keep + n);
    return n > 0;
  };
  for (;;) {
    while (z.stream.avail_in > 0 && *z.stream.next_in == 0) {
      ++z.stream.next_in;
      --z.stream.avail_in;
    }
    if (z.stream.avail_in > 0) break;
    if (!more_input(0)) return false;
  }
  if (z.stream.avail_in < 2 && !more_input(z.stream.avail_in)) return false;
  if (!starts_with_gzip_magic(z.stream.next_in, z.stream.avail_in)) return false;
  if (inflateReset(&z.stream) != Z_OK) throw std::runtime_error("cannot restart gzip decompression");
  return true;
}

bool ByteSource::read_slow(uint8_t* out, size_t n) {
  while (n > 0) {
    if (next_ == end_ && !refill()) return false;
    const size_t take = std::min(n, static_cast<size_t>(end_ - next_));
    std::memcpy(out, next_, take);
    next_ += take;
    out += take;
    n -= take;
  }
  return true;
}

HeldBytes ByteSource::read_rest() {
  HeldBytes out;
  for (;;) {
    out.append(next_, static_cast<size_t>(end_ - next_));
    next_ = end_;
    if (!refill()) return out;
  }
}

}  // namespace memsnap
