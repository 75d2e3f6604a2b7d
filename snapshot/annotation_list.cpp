#include "snapshot/annotation_list.h"

namespace memsnap {

uint32_t AnnotationList::intern(const std::string& text) {
  const auto [it, added] = text_ids_.try_emplace(text, static_cast<uint32_t>(texts_.size()));
  if (added) texts_.push_back(text);
  return it->second;
}

void AnnotationList::push_back(const SnapshotAnnotation& annotation) {
  rows_.push_back({annotation.device, annotation.time_us, intern(annotation.stage), intern(annotation.name)});
}

bool AnnotationList::operator==(const AnnotationList& other) const {
  if (size() != other.size()) return false;
  for (size_t i = 0; i < size(); ++i)
    if (device(i) != other.device(i) || time_us(i) != other.time_us(i) || stage(i) != other.stage(i) ||
        name(i) != other.name(i))
      return false;
  return true;
}

}  // namespace memsnap
