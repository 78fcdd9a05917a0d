// Reducing findings (props::reduce_case, `shardcheck reduce`, a campaign's reduced finding
// files): a reduced case still shows what it showed, no single edit of it does (locally
// minimal), it is never larger, the same input reduces the same way, and the bound on
// replays holds.
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "shardcheck/reduce.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

props::EvalOptions legacy_eval() {
  props::EvalOptions eval;
  eval.policy = Policy::legacy;
  return eval;
}

// The first `wanted` cases of a legacy campaign (seed 1) with findings of different
// signatures, as the campaign generates them.
std::vector<std::pair<Case, props::Shown>> legacy_findings(std::size_t wanted) {
  campaign::Options options;
  options.seed = 1;
  options.eval = legacy_eval();
  std::vector<std::pair<Case, props::Shown>> found;
  std::map<std::string, bool> signatures;
  for (Index i = 0; i < 3000 && found.size() < wanted; ++i) {
    Case c = campaign::generate_indexed_case(options, i);
    props::Shown shown = props::shown_by(c, options.eval);
    if (shown.signature.empty() || signatures[shown.signature]) continue;
    signatures[shown.signature] = true;
    found.emplace_back(std::move(c), std::move(shown));
  }
  return found;
}

// How big a case is as the reducer sees it: the elements of its maps' logical shapes,
// then its pieces, then its text. The reducer's edits never add an element or a piece;
// the text may grow (a simpler dtype can spell its values longer).
std::tuple<Index, Index, std::size_t> size_of(const Case& c) {
  Index elements = 0, pieces = 0;
  for (const Map* map : {&c.map, c.truth ? &*c.truth : nullptr, c.target_map ? &*c.target_map : nullptr}) {
    if (map == nullptr) continue;
    elements += checked_numel(map->logical_shape).value_or(0);
    for (const auto& entry : map->ranks) pieces += static_cast<Index>(entry.pieces.size());
  }
  return {elements, pieces, encode_case(c).dump().size()};
}

TEST(ReduceCase, LegacyFindingsShrinkToLocallyMinimalCasesThatStillShowThem) {
  const auto findings = legacy_findings(12);
  ASSERT_GE(findings.size(), 8u) << "seed 1 of the legacy model draws fewer signatures than it did";
  int minimal = 0;
  int smaller = 0;
  for (const auto& [given, shown] : findings) {
    const props::Reduced reduced = props::reduce_case(given, props::keeps_what_it_shows(shown, legacy_eval()));
    ASSERT_TRUE(reduced.shows) << shown.signature;
    EXPECT_EQ(props::shown_by(reduced.reduced, legacy_eval()), shown) << shown.signature;
    EXPECT_LE(size_of(reduced.reduced), size_of(given)) << shown.signature;
    EXPECT_LE(reduced.evaluations, props::ReduceOptions{}.max_evaluations);
    if (size_of(reduced.reduced) < size_of(given)) ++smaller;
    // Provenance is never edited: the signature names it.
    EXPECT_EQ(reduced.reduced.name, given.name);
    if (!reduced.minimal) continue;
    ++minimal;
    // Locally minimal: no edit the reducer knows keeps what the case shows.
    for (const Json& edited : props::case_edits(encode_case(reduced.reduced))) {
      auto decoded = decode_case(edited);
      if (!decoded) continue;  // an edit the codec refuses is not a case
      EXPECT_NE(props::shown_by(decoded.value(), legacy_eval()), shown)
          << shown.signature << ": an edit still shows it:\n"
          << edited.dump();
    }
  }
  EXPECT_GE(minimal, static_cast<int>(findings.size()) - 1) << "most reductions end before the bound";
  EXPECT_GE(smaller, static_cast<int>(findings.size()) / 2) << "reductions that removed nothing";
}

TEST(ReduceCase, TheSameCaseReducesTheSameWay) {
  const auto findings = legacy_findings(3);
  ASSERT_FALSE(findings.empty());
  for (const auto& [given, shown] : findings) {
    const auto first = props::reduce_case(given, props::keeps_what_it_shows(shown, legacy_eval()));
    const auto second = props::reduce_case(given, props::keeps_what_it_shows(shown, legacy_eval()));
    EXPECT_EQ(encode_case(first.reduced), encode_case(second.reduced)) << shown.signature;
    EXPECT_EQ(first.steps, second.steps);
    EXPECT_EQ(first.evaluations, second.evaluations);
  }
}

TEST(ReduceCase, TheBoundOnReplaysHoldsAndSaysTheResultIsNotMinimal) {
  const auto findings = legacy_findings(1);
  ASSERT_FALSE(findings.empty());
  const auto& [given, shown] = findings.front();
  Index calls = 0;
  const auto counted = [&, keeps = props::keeps_what_it_shows(shown, legacy_eval())](const Case& c) {
    ++calls;
    return keeps(c);
  };
  const auto reduced = props::reduce_case(given, counted, props::ReduceOptions{3});
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(reduced.evaluations, 3);
  EXPECT_FALSE(reduced.minimal);
  EXPECT_TRUE(reduced.shows);
}

TEST(ReduceCase, ACaseThatDoesNotShowItIsReturnedAsGiven) {
  const auto findings = legacy_findings(1);
  ASSERT_FALSE(findings.empty());
  const Case& given = findings.front().first;
  const auto reduced = props::reduce_case(given, [](const Case&) { return false; });
  EXPECT_FALSE(reduced.shows);
  EXPECT_EQ(reduced.evaluations, 1);
  EXPECT_EQ(encode_case(reduced.reduced), encode_case(given));
}

// The command line: a campaign's finding files come out reduced, `shardcheck reduce`
// reduces a file the same way, and both still fail repro with their signature.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Ran {
  int exit_code = -1;
  std::string out;
};

class ReduceCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shardcheck-reduce-{}-{}",
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                                                   static_cast<long>(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  Ran shardcheck(const std::string& args) {
    const fs::path captured = dir_ / "output.txt";
    const int status =
        std::system((quoted(SHARDCHECK_BINARY) + " " + args + " > " + quoted(captured.string()) + " 2>&1").c_str());
    return Ran{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(captured)};
  }
  std::vector<fs::path> findings(const fs::path& out) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(out / "findings")) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  fs::path dir_;
};

TEST_F(ReduceCommand, ACampaignWritesReducedFindingsThatStillFail) {
  const fs::path out = dir_ / "campaign";
  const Ran ran = shardcheck(
      fmt::format("campaign --seed 1 --cases 120 --policy legacy --jobs 2 --quiet --reduce-evaluations {} --out {}",
                  props::kDefaultMaxEvaluations, quoted(out.string())));
  ASSERT_EQ(ran.exit_code, 1) << ran.out;
  const auto files = findings(out);
  ASSERT_GE(files.size(), 5u);
  int minimal = 0;
  for (const fs::path& file : files) {
    const auto json = nlohmann::json::parse(read_text(file));
    ASSERT_TRUE(json.contains("reduced")) << file;
    const auto& reduced = json.at("reduced");
    EXPECT_LE(reduced.at("evaluations").get<long long>(), props::kDefaultMaxEvaluations) << file;
    EXPECT_TRUE(reduced.contains("from_case")) << file;
    if (reduced.at("locally_minimal").get<bool>()) ++minimal;
    const Ran replay = shardcheck("repro " + quoted(file.string()));
    EXPECT_EQ(replay.exit_code, 1) << file << "\n" << replay.out;
  }
  EXPECT_GE(minimal, static_cast<int>(files.size()) - 1);
  // The same campaign without reduction keeps the generated cases: never smaller files.
  const fs::path plain = dir_ / "plain";
  ASSERT_EQ(shardcheck(fmt::format("campaign --seed 1 --cases 120 --policy legacy --jobs 2 --quiet --reduce-evaluations 0 --out {}",
                                   quoted(plain.string())))
                .exit_code,
            1);
  const auto unreduced = findings(plain);
  ASSERT_EQ(unreduced.size(), files.size());
  std::uintmax_t reduced_bytes = 0, plain_bytes = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    EXPECT_EQ(files[i].filename(), unreduced[i].filename()) << "the same signatures";
    EXPECT_FALSE(nlohmann::json::parse(read_text(unreduced[i])).contains("reduced"));
    reduced_bytes += fs::file_size(files[i]);
    plain_bytes += fs::file_size(unreduced[i]);
  }
  EXPECT_LT(reduced_bytes, plain_bytes);
}

TEST_F(ReduceCommand, ReducingAFindingFileKeepsItsSignature) {
  const fs::path out = dir_ / "campaign";
  ASSERT_EQ(shardcheck(fmt::format("campaign --seed 1 --cases 200 --policy legacy --jobs 2 --quiet "
                                   "--reduce-evaluations 0 --out {}",
                                   quoted(out.string())))
                .exit_code,
            1);
  const auto files = findings(out);
  ASSERT_FALSE(files.empty());
  for (std::size_t i = 0; i < std::min<std::size_t>(files.size(), 4); ++i) {
    const fs::path reduced = dir_ / fmt::format("reduced-{}.json", i);
    const Ran ran = shardcheck(fmt::format("reduce {} --out {}", quoted(files[i].string()), quoted(reduced.string())));
    ASSERT_EQ(ran.exit_code, 0) << ran.out;
    EXPECT_NE(ran.out.find("keeping the finding "), std::string::npos) << ran.out;
    const auto before = nlohmann::json::parse(read_text(files[i]));
    const auto after = nlohmann::json::parse(read_text(reduced));
    EXPECT_EQ(after.at("signature"), before.at("signature"));
    EXPECT_TRUE(after.at("reduced").at("locally_minimal").get<bool>()) << ran.out;
    EXPECT_LE(fs::file_size(reduced), fs::file_size(files[i]));
    const Ran replay = shardcheck("repro " + quoted(reduced.string()));
    EXPECT_EQ(replay.exit_code, 1) << replay.out;
  }
  // A file whose recorded finding the case does not show is refused, not reduced.
  auto edited = nlohmann::json::parse(read_text(files.front()));
  edited["signature"] = "legacy: not what this case shows";
  const fs::path lying = dir_ / "lying.json";
  std::ofstream(lying) << edited.dump(2);
  const Ran refused =
      shardcheck(fmt::format("reduce {} --out {}", quoted(lying.string()), quoted((dir_ / "never.json").string())));
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("does not show its finding"), std::string::npos) << refused.out;
  EXPECT_FALSE(fs::exists(dir_ / "never.json"));
}

// Reported cases shrink too, keeping their verdict: repro of the reduced file ends as
// repro of the reported one did.
TEST_F(ReduceCommand, ReportedCasesShrinkKeepingTheirVerdict) {
  std::vector<fs::path> reported;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("reported-", 0) == 0 && entry.path().extension() == ".json") reported.push_back(entry.path());
  }
  std::sort(reported.begin(), reported.end());
  ASSERT_GE(reported.size(), 6u);
  int shrunk = 0;
  for (std::size_t i = 0; i < reported.size(); i += reported.size() / 6) {
    const fs::path& file = reported[i];
    const Ran before = shardcheck("repro --json " + quoted(file.string()));
    const fs::path reduced = dir_ / file.filename();
    const Ran ran = shardcheck(fmt::format("reduce {} --out {}", quoted(file.string()), quoted(reduced.string())));
    ASSERT_EQ(ran.exit_code, 0) << file << "\n" << ran.out;
    const Ran after = shardcheck("repro --json " + quoted(reduced.string()));
    EXPECT_EQ(after.exit_code, before.exit_code) << file << "\n" << before.out << "\n" << after.out;
    const auto verdict = [](const Ran& r) {
      const auto json = nlohmann::json::parse(r.out, nullptr, false);
      return json.is_object() ? json.value("verdict", std::string()) + " " + json.value("kind", std::string()) : r.out;
    };
    EXPECT_EQ(verdict(after), verdict(before)) << file;
    if (ran.out.find(": 0 edits") == std::string::npos) ++shrunk;
  }
  EXPECT_GE(shrunk, 1) << "no reported case shrank";
}

}  // namespace
}  // namespace shardcheck
