// AnnotationList keeps each annotation in 24 bytes with its texts interned, and gives back
// exactly what it was given, in order.
#include "snapshot/annotation_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace annotation_list_test {

using memsnap::AnnotationList;
using memsnap::SnapshotAnnotation;

TEST(AnnotationList, GivesBackWhatItWasGiven) {
  std::vector<SnapshotAnnotation> want;
  for (int64_t step = 0; step < 5000; ++step) {
    const std::string name = step % 3 == 0 ? "ProfilerStep#" + std::to_string(step) : "a much longer name than a string holds inline";
    want.push_back({step % 2, "START", name, step * 10});
    want.push_back({step % 2, "END", name, step * 10 + 7});
  }
  want.push_back({-1, "", "", INT64_MIN});
  AnnotationList list;
  list.reserve(want.size());
  for (const SnapshotAnnotation& a : want) list.push_back(a);
  ASSERT_EQ(list.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(list[i], want[i]) << i;
    EXPECT_EQ(list.stage(i), want[i].stage);
    EXPECT_EQ(list.name(i), want[i].name);
    EXPECT_EQ(list.device(i), want[i].device);
    EXPECT_EQ(list.time_us(i), want[i].time_us);
  }
  size_t i = 0;
  for (const SnapshotAnnotation& a : list) EXPECT_EQ(a, want[i++]);
  EXPECT_EQ(i, want.size());

  // A copy stands alone: the original's end changes nothing in it.
  AnnotationList copy;
  {
    AnnotationList original = list;
    copy = original;
    original.push_back({0, "START", "only in the original", 1});
    EXPECT_FALSE(original == copy);
  }
  EXPECT_TRUE(copy == list);
  copy.push_back({0, "START", "ProfilerStep#3", 1});
  EXPECT_EQ(copy[copy.size() - 1].name, "ProfilerStep#3");
  EXPECT_FALSE(copy == list);
}

}  // namespace annotation_list_test
