// A small streaming JSON writer for the few answers too big to build as nlohmann values
// first (a zoomed timeline has ~10^5 points): commas and nesting are kept track of here, and
// strings go through nlohmann's escaping (invalid UTF-8 replaced).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace memsnap::web {

class JsonText {
 public:
  JsonText& begin_object() { return open('{'); }
  JsonText& end_object() { return close('}'); }
  JsonText& begin_array() { return open('['); }
  JsonText& end_array() { return close(']'); }

  JsonText& key(std::string_view name) {
    separate();
    out_ += '"';
    out_ += name;  // keys are ours: plain ASCII, nothing to escape
    out_ += "\":";
    after_key_ = true;
    return *this;
  }
  template <typename Integer>
  JsonText& value(Integer number) {
    separate();
    char text[24];
    out_.append(text, std::to_chars(text, text + sizeof text, number).ptr);
    return *this;
  }
  JsonText& value(bool flag) {
    separate();
    out_ += flag ? "true" : "false";
    return *this;
  }
  JsonText& string(std::string_view text) {
    separate();
    out_ += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return *this;
  }
  template <typename Integer>
  JsonText& values(const std::vector<Integer>& numbers) {
    begin_array();
    for (Integer n : numbers) value(n);
    return end_array();
  }
  template <typename Integer>
  JsonText& field(std::string_view name, Integer number) { return key(name).value(number); }

  std::string take() { return std::move(out_); }

 private:
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = 0;
    }
  }
  JsonText& open(char bracket) {
    separate();
    out_ += bracket;
    first_.push_back(1);
    return *this;
  }
  JsonText& close(char bracket) {
    out_ += bracket;
    first_.pop_back();
    return *this;
  }

  std::string out_;
  std::vector<uint8_t> first_;  // per open container: nothing written in it yet (1)
  bool after_key_ = false;
};

}  // namespace memsnap::web
