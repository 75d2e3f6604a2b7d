#include "viewer/verdict.h"

namespace memsnap {

std::string_view verdict_kind_name(VerdictKind kind) {
  switch (kind) {
    case VerdictKind::kOomCause: return "oom_cause";
    case VerdictKind::kSettings: return "settings";
    case VerdictKind::kGrowth: return "growth";
    case VerdictKind::kRanks: return "ranks";
    case VerdictKind::kFit: return "fit";
  }
  return "oom_cause";
}

nlohmann::json verdict_to_json(const Verdict& verdict) {
  nlohmann::json evidence = nlohmann::json::object();
  for (const auto& [name, value] : verdict.evidence) evidence[name] = value;
  return {{"kind", verdict_kind_name(verdict.kind)}, {"answer", verdict.answer},
          {"judged", verdict.judged()},              {"sentence", verdict.sentence},
          {"reason", verdict.reason},                {"basis", verdict.basis},
          {"evidence", std::move(evidence)}};
}

}  // namespace memsnap
