// Parser for the allocator configuration string (grammar in allocator_config.h).
//
// Tokenizing follows PyTorch: `,` `:` `[` `]` are tokens of their own, spaces vanish, and
// everything else groups into words. Each key then consumes its `: value` (or `: [list]`).
// The input is hostile: its length is bounded, numbers are checked for overflow, and every
// error is one line naming the key and what was expected.
#include "allocator/allocator_config.h"

#include <bit>
#include <charconv>
#include <cstdlib>
#include <set>
#include <sstream>

namespace memsnap {
namespace {

constexpr size_t kMaxConfigLength = 64 * 1024;
constexpr size_t kMiB = 1 << 20;

struct ConfigError {
  explicit ConfigError(std::string text) : message(std::move(text)) {}
  std::string message;
};

std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char ch : text) {
    if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
      if (!word.empty()) tokens.push_back(std::move(word));
      word.clear();
      tokens.emplace_back(1, ch);
    } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
      word += ch;
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

std::string quoted(std::string_view token) {
  std::string out = "'";
  for (char ch : token.substr(0, 40)) {
    const auto byte = static_cast<unsigned char>(ch);
    out += (byte >= 0x20 && byte < 0x7f) ? ch : '?';
  }
  if (token.size() > 40) out += "...";
  return out + "'";
}

class ConfigParser {
 public:
  explicit ConfigParser(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  // The settings the string holds, on top of `config`; keys_set() then names the keys it set.
  AllocatorConfig parse(AllocatorConfig config = {}) {
    while (pos_ < tokens_.size()) {
      const std::string key = tokens_[pos_++];
      if (key == ",") continue;
      if (key == ":" || key == "[" || key == "]")
        throw ConfigError("unexpected " + quoted(key) + " where a key was expected");
      expect(key, ":");
      parse_value(key, config);
      keys_set_.insert(key);
      if (pos_ < tokens_.size() && tokens_[pos_] != ",")
        throw ConfigError(key + ": unexpected " + quoted(tokens_[pos_]) +
                          " after the value (separate settings with ',')");
    }
    return config;
  }
  const std::set<std::string>& keys_set() const { return keys_set_; }

 private:
  void parse_value(const std::string& key, AllocatorConfig& config) {
    if (key == "max_split_size_mb") {
      config.max_split_size = mebibytes(key, next_word(key, "an integer number of MiB"), 20);
    } else if (key == "max_non_split_rounding_mb") {
      config.max_non_split_rounding_size =
          mebibytes(key, next_word(key, "an integer number of MiB"), 20);
    } else if (key == "large_segment_size_mb") {
      // Must hold any request below kMinLargeAlloc (10 MiB), and more (PyTorch: above 10).
      config.large_segment_size = mebibytes(key, next_word(key, "an integer number of MiB"), 11);
    } else if (key == "garbage_collection_threshold") {
      config.garbage_collection_threshold = fraction(key, next_word(key, "a number"));
    } else if (key == "roundup_power2_divisions") {
      parse_divisions(key, config);
    } else if (key == "expandable_segments") {
      config.expandable_segments = boolean(key);
    } else if (key == "release_lock_on_cudamalloc") {
      config.release_lock_on_cudamalloc = boolean(key);
    } else if (key == "per_process_memory_fraction") {
      config.per_process_memory_fraction = closed_fraction(key, next_word(key, "a number"));
    } else if (key == "backend") {
      const std::string value = next_word(key, "'native'");
      if (value != "native")
        throw ConfigError("backend: memsnap implements the native caching allocator only, got " +
                          quoted(value));
    } else if (key == "graph_capture_record_stream_reuse") {
      config.graph_capture_record_stream_reuse = boolean(key);
    } else if (key == "pinned_use_cuda_host_register" || key == "pinned_use_background_threads") {
      boolean(key);
      config.notices.push_back(key + " has no effect in memsnap (it configures PyTorch's host allocator)");
    } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
      integer(key, next_word(key, "an integer"));
      config.notices.push_back(key + " has no effect in memsnap (it configures PyTorch's host "
                               "allocator)");
    } else {
      throw ConfigError("unknown key " + quoted(key) +
                        " (expected one of max_split_size_mb, max_non_split_rounding_mb, "
                        "large_segment_size_mb, garbage_collection_threshold, "
                        "roundup_power2_divisions, expandable_segments, "
                        "release_lock_on_cudamalloc, graph_capture_record_stream_reuse, "
                        "per_process_memory_fraction, backend, pinned_*)");
    }
  }

  // roundup_power2_divisions:N  or  roundup_power2_divisions:[256:1,512:2,1024:4,>:8]
  // where list keys are power-of-two interval starts in MiB and `>` means "all above".
  void parse_divisions(const std::string& key, AllocatorConfig& config) {
    auto& divisions = config.roundup_power2_divisions;
    if (pos_ < tokens_.size() && tokens_[pos_] == "[") {
      ++pos_;
      bool first = true;
      size_t last_index = 0;
      while (true) {
        if (pos_ >= tokens_.size()) throw ConfigError(key + ": missing closing ']'");
        if (tokens_[pos_] == "]") break;
        const std::string boundary = next_word(key, "an interval in MiB or '>'");
        expect(key, ":");
        const size_t value = integer(key, next_word(key, "a number of divisions"));
        if (value != 0 && !std::has_single_bit(value))
          throw ConfigError(key + ": divisions must be a power of two (or 0 to disable), got " +
                            std::to_string(value));
        if (boundary == ">") {
          for (size_t i = last_index + 1; i < divisions.size(); ++i) divisions[i] = value;
        } else {
          const size_t mib = integer(key, boundary);
          if (!std::has_single_bit(mib))
            throw ConfigError(key + ": intervals must be powers of two (in MiB), got " +
                              quoted(boundary));
          const size_t index =
              std::min<size_t>(static_cast<size_t>(std::bit_width(mib) - 1), divisions.size() - 1);
          if (first)
            for (size_t i = 0; i < index; ++i) divisions[i] = value;
          first = false;
          divisions[index] = value;
          last_index = index;
        }
        if (pos_ < tokens_.size() && tokens_[pos_] == ",") ++pos_;
        else if (pos_ < tokens_.size() && tokens_[pos_] != "]")
          throw ConfigError(key + ": expected ',' or ']' in the list, got " +
                            quoted(tokens_[pos_]));
      }
      ++pos_;  // ']'
    } else {
      const size_t value = integer(key, next_word(key, "a power of two or a [list]"));
      if (!std::has_single_bit(value))
        throw ConfigError(key + ": divisions must be a power of two, got " +
                          std::to_string(value));
      divisions.fill(value);
    }
  }

  std::string next_word(const std::string& key, const std::string& expected) {
    if (pos_ >= tokens_.size()) throw ConfigError(key + ": expected " + expected + ", got nothing");
    const std::string& token = tokens_[pos_];
    if (token == "," || token == ":" || token == "[" || token == "]")
      throw ConfigError(key + ": expected " + expected + ", got " + quoted(token));
    ++pos_;
    return token;
  }

  void expect(const std::string& key, const char* token) {
    if (pos_ >= tokens_.size() || tokens_[pos_] != token)
      throw ConfigError(key + ": expected '" + token + "' after " + quoted(key));
    ++pos_;
  }

  static size_t integer(const std::string& key, const std::string& word) {
    if (word.empty() || word.size() > 19 || word.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError(key + ": expected a non-negative integer, got " + quoted(word));
    return std::stoull(word);
  }

  static size_t mebibytes(const std::string& key, const std::string& word, size_t at_least) {
    const size_t mib = integer(key, word);
    if (mib < at_least)
      throw ConfigError(key + ": must be at least " + std::to_string(at_least) + " (MiB), got " + word);
    if (mib > std::numeric_limits<size_t>::max() / kMiB)
      return std::numeric_limits<size_t>::max();
    return mib * kMiB;
  }

  static double fraction(const std::string& key, const std::string& word) {
    char* end = nullptr;
    const double value = std::strtod(word.c_str(), &end);
    if (end == word.c_str() || *end != '\0' || !(value > 0.0 && value < 1.0))
      throw ConfigError(key + ": expected a number between 0 and 1 (exclusive), got " +
                        quoted(word));
    return value;
  }

  // 0 <= value <= 1, in PyTorch's words for a value outside.
  static double closed_fraction(const std::string& key, const std::string& word) {
    char* end = nullptr;
    const double value = std::strtod(word.c_str(), &end);
    if (end == word.c_str() || *end != '\0' || !(value >= 0.0 && value <= 1.0))
      throw ConfigError(key + " is invalid, set it in [0.0, 1.0], got " + quoted(word));
    return value;
  }

  bool boolean(const std::string& key) {
    const std::string word = next_word(key, "True or False");
    if (word == "True") return true;
    if (word == "False") return false;
    throw ConfigError(key + ": expected True or False, got " + quoted(word));
  }

  std::vector<std::string> tokens_;
  size_t pos_ = 0;
  std::set<std::string> keys_set_;
};

}  // namespace

Result<AllocatorConfig> parse_allocator_config(std::string_view text) {
  if (text.size() > kMaxConfigLength)
    return Result<AllocatorConfig>::failure("allocator config: longer than 64 KiB");
  try {
    AllocatorConfig config = ConfigParser(tokenize(text)).parse();
    config.source = std::string(text);
    return config;
  } catch (const ConfigError& error) {
    return Result<AllocatorConfig>::failure("allocator config: " + error.message);
  }
}

Result<AllocatorConfig> update_allocator_config(const AllocatorConfig& base, std::string_view text) {
  if (text.size() > kMaxConfigLength)
    return Result<AllocatorConfig>::failure("allocator config: longer than 64 KiB");
  try {
    ConfigParser parser(tokenize(text));
    const AllocatorConfig given = parser.parse();
    const std::set<std::string>& keys = parser.keys_set();
    const auto set = [&](const char* key) { return keys.count(key) != 0; };
    const AllocatorConfig defaults;
    AllocatorConfig config = base;
    config.max_split_size = set("max_split_size_mb") ? given.max_split_size : defaults.max_split_size;
    config.roundup_power2_divisions =
        set("roundup_power2_divisions") ? given.roundup_power2_divisions : defaults.roundup_power2_divisions;
    config.garbage_collection_threshold =
        set("garbage_collection_threshold") ? given.garbage_collection_threshold : 0.0;
    if (set("large_segment_size_mb")) config.large_segment_size = given.large_segment_size;
    config.max_non_split_rounding_size =
        set("max_non_split_rounding_mb") ? given.max_non_split_rounding_size : config.large_segment_size;
    if (set("expandable_segments")) config.expandable_segments = given.expandable_segments;
    if (set("release_lock_on_cudamalloc")) config.release_lock_on_cudamalloc = given.release_lock_on_cudamalloc;
    if (set("graph_capture_record_stream_reuse"))
      config.graph_capture_record_stream_reuse = given.graph_capture_record_stream_reuse;
    if (set("per_process_memory_fraction")) config.per_process_memory_fraction = given.per_process_memory_fraction;
    config.notices = given.notices;
    config.source = to_config_string(config);
    return config;
  } catch (const ConfigError& error) {
    return Result<AllocatorConfig>::failure("allocator config: " + error.message);
  }
}

Result<AllocatorConfig> allocator_config_from_environment() {
  AllocatorConfig config;
  for (const char* name : {"MEMSNAP_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    Result<AllocatorConfig> parsed = parse_allocator_config(value);
    if (!parsed) return Result<AllocatorConfig>::failure(std::string(name) + ": " + parsed.error());
    config = parsed.value();
    config.origin = name;
    break;
  }
  Result<bool> caching = caching_from_environment();
  if (!caching) return Result<AllocatorConfig>::failure(caching.error());
  config.caching = caching.value();
  return config;
}

Result<bool> caching_from_environment() {
  bool caching = true;
  for (const char* name : {"MEMSNAP_NO_CACHING", "PYTORCH_NO_CUDA_MEMORY_CACHING"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string text = value;
    if (text == "1" || text == "true" || text == "True" || text == "yes") {
      caching = false;
    } else if (!(text.empty() || text == "0" || text == "false" || text == "False" || text == "no")) {
      return Result<bool>::failure(std::string(name) + ": expected 1 or 0, got '" +
                                   text.substr(0, 40) + "'");
    }
  }
  return caching;
}

namespace {
// The shortest text that reads back as the same double: 0.6, not 0.59999999999999998.
std::string shortest_text(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  return error == std::errc{} ? std::string(text, end) : std::to_string(value);
}
}  // namespace

std::string to_config_string(const AllocatorConfig& config) {
  std::ostringstream out;
  const AllocatorConfig defaults;
  const char* separator = "";
  auto put = [&](const std::string& key, const std::string& value) {
    out << separator << key << ':' << value;
    separator = ",";
  };
  if (config.max_split_size != defaults.max_split_size)
    put("max_split_size_mb", std::to_string(config.max_split_size / kMiB));
  if (config.max_non_split_rounding_size != defaults.max_non_split_rounding_size)
    put("max_non_split_rounding_mb", std::to_string(config.max_non_split_rounding_size / kMiB));
  if (config.large_segment_size != defaults.large_segment_size)
    put("large_segment_size_mb", std::to_string(config.large_segment_size / kMiB));
  if (config.garbage_collection_threshold != 0.0)
    put("garbage_collection_threshold", shortest_text(config.garbage_collection_threshold));
  if (config.roundup_power2_divisions != defaults.roundup_power2_divisions) {
    std::string list = "[";
    for (size_t i = 0; i < config.roundup_power2_divisions.size(); ++i) {
      if (i) list += ',';
      list += std::to_string(size_t{1} << i) + ':' + std::to_string(config.roundup_power2_divisions[i]);
    }
    put("roundup_power2_divisions", list + "]");
  }
  if (config.expandable_segments) put("expandable_segments", "True");
  if (config.release_lock_on_cudamalloc) put("release_lock_on_cudamalloc", "True");
  if (config.graph_capture_record_stream_reuse) put("graph_capture_record_stream_reuse", "True");
  if (config.per_process_memory_fraction != 1.0)
    put("per_process_memory_fraction", shortest_text(config.per_process_memory_fraction));
  return out.str();
}

}  // namespace memsnap
