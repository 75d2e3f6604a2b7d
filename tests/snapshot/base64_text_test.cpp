// Base64 as pickle_extras.h stores bytes in a string: every byte value and length back exactly,
// and anything but padded base64 refused.
#include "snapshot/base64_text.h"

#include <gtest/gtest.h>

#include <string>

namespace memsnap {
namespace {

TEST(Base64Text, EveryByteAndEveryLengthComesBack) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t length = 0; length <= all.size(); length += length < 8 ? 1 : 37) {
    const std::string bytes = all.substr(all.size() - length);
    const std::string text = to_base64(bytes);
    EXPECT_EQ(text.size() % 4, 0u);
    EXPECT_EQ(from_base64(text), bytes) << length;
  }
  EXPECT_EQ(to_base64("memsnap"), "bWVtc25hcA==");  // RFC 4648's alphabet and padding
  EXPECT_EQ(to_base64("\xfb\xff"), "+/8=");
}

TEST(Base64Text, AnythingElseIsRefused) {
  for (const char* text : {"abc", "ab=c", "a===", "====", "ab\n=", "bWVt c25h", "QR==", "QUJ=", "=AAA", "AA==AAAA", "-_8="})
    EXPECT_FALSE(from_base64(text).has_value()) << text;
  EXPECT_EQ(from_base64(""), std::string());
}

}  // namespace
}  // namespace memsnap
