// The pipe an upload is parsed through: what is written comes out whole and in order whatever
// the chunk sizes, a full pipe holds the writer back, and once the reader stops the writer's
// bytes are dropped instead of blocking it.
#include "web/byte_pipe.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

namespace memsnap::web {
namespace {

TEST(BytePipe, BytesComeOutWholeAndInOrder) {
  std::string sent(10 << 20, '\0');
  std::mt19937 random(7);
  for (char& c : sent) c = static_cast<char>(random());
  BytePipe pipe(64 << 10);
  std::thread writer([&] {
    std::mt19937 sizes(11);
    size_t at = 0;
    while (at < sent.size()) {
      const size_t n = std::min<size_t>(sent.size() - at, sizes() % 200000);  // some larger than the pipe
      pipe.write(sent.data() + at, n);
      at += n;
    }
    pipe.close();
  });
  std::string received;
  std::vector<uint8_t> buffer(3000);
  while (const size_t n = pipe.read(buffer.data(), buffer.size())) received.append(buffer.begin(), buffer.begin() + n);
  writer.join();
  EXPECT_EQ(received.size(), sent.size());
  EXPECT_TRUE(received == sent);
  EXPECT_EQ(pipe.read(buffer.data(), buffer.size()), 0u) << "the end stays the end";
}

TEST(BytePipe, AReaderThatStopsNoLongerHoldsTheWriterBack) {
  BytePipe pipe(1024);
  std::vector<uint8_t> buffer(100);
  std::thread reader([&] {
    EXPECT_EQ(pipe.read(buffer.data(), buffer.size()), 100u);
    pipe.stop_reading();
  });
  const std::string chunk(1000, 'x');
  for (int i = 0; i < 1000; ++i) pipe.write(chunk.data(), chunk.size());  // 1 MB through a 1 KiB pipe
  pipe.close();
  reader.join();
}

}  // namespace
}  // namespace memsnap::web
