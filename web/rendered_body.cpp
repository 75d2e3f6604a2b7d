#include "web/rendered_body.h"

#include <zlib.h>

#include <algorithm>
#include <stdexcept>

namespace memsnap::web {

const std::string& RenderedBody::gzip() const {
  bool made_here = false;
  std::call_once(gzip_once_, [&] {
    gzip_ = gzip_compress(text_, 1);
    gzip_made_.store(true, std::memory_order_release);
    made_here = true;
  });
  if (made_here && on_gzip_) on_gzip_();
  return gzip_;
}

std::string gzip_compress(std::string_view data, int level) {
  z_stream stream{};
  // windowBits 15 + 16: the gzip wrapper rather than zlib's.
  if (deflateInit2(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("gzip: cannot start the compressor");
  // zlib counts in 32 bits: the input goes in slices, the output grows as it fills.
  constexpr size_t kSlice = size_t{1} << 30;
  std::string out;
  out.resize(std::min(deflateBound(&stream, static_cast<uLong>(std::min(data.size(), kSlice))), uLong{1} << 30) + 64);
  size_t consumed = 0, produced = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (stream.avail_in == 0 && consumed < data.size()) {
      const size_t slice = std::min(kSlice, data.size() - consumed);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + consumed));
      stream.avail_in = static_cast<uInt>(slice);
      consumed += slice;
    }
    if (produced == out.size()) out.resize(out.size() * 2);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(std::min(out.size() - produced, kSlice));
    const uInt room = stream.avail_out;
    status = deflate(&stream, consumed == data.size() ? Z_FINISH : Z_NO_FLUSH);
    produced += room - stream.avail_out;
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
      deflateEnd(&stream);
      throw std::runtime_error("gzip: compression failed");
    }
  }
  deflateEnd(&stream);
  out.resize(produced);
  // The buffer was sized (and zeroed) for the input's worst case: a kept gzip would otherwise
  // hold about its text's size, not its own.
  out.shrink_to_fit();
  return out;
}

}  // namespace memsnap::web
