// A conclusion about the user's program, as one value: what kind of question it answers, the
// answer, the one sentence every front end prints (the CLI, the JSON's "conclusion", the web
// pages, the Python package), the figures it rests on, and how it was reached. An answer the
// data cannot support is "cannot_judge", with the reason in the sentence.
//
// Each kind is decided in one place: the OOM's cause in oom_cause.h, the settings advice in
// settings_advisor.h, growth in growth.h, the ranks' outliers in job_ranks.h, "it fits" in
// fit_estimate.h. Front ends format a Verdict; they never decide anew.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace memsnap {

enum class VerdictKind { kOomCause, kSettings, kGrowth, kRanks, kFit };
std::string_view verdict_kind_name(VerdictKind kind);  // "oom_cause", "settings", "growth", "ranks", "fit"

inline constexpr std::string_view kCannotJudgeAnswer = "cannot_judge";

struct Verdict {
  VerdictKind kind = VerdictKind::kOomCause;
  std::string answer = std::string(kCannotJudgeAnswer);  // the kind's answer, or "cannot_judge"
  std::string sentence;  // what every front end shows
  std::string reason;    // with cannot_judge: why, as a clause ("the trace has no frees")
  // How it was reached: "the figures recorded at the error", "a replay that reproduced the
  // recording (12 of 12 segments)", "40 steps compared".
  std::string basis;
  std::vector<std::pair<std::string, int64_t>> evidence;  // named figures (bytes, counts)

  bool judged() const { return answer != kCannotJudgeAnswer; }
  void add(std::string name, int64_t value) { evidence.emplace_back(std::move(name), value); }
  void add(std::string name, uint64_t value) { add(std::move(name), static_cast<int64_t>(value)); }
};

// {"kind", "answer", "judged", "sentence", "reason", "basis", "evidence": {name: value}}
nlohmann::json verdict_to_json(const Verdict& verdict);

}  // namespace memsnap
