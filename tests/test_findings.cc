// The judges' table (findings.def): signatures are built from it, the user guide's list of
// judgements is the table, and a finding file carries the expectations of its row.
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "shardcheck/properties.h"

namespace {

using namespace shardcheck;
using props::FindingExpectation;
using props::JudgeId;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The guide's table (docs/guide/cli.md), as findings.def's rows give it.
std::string rendered_table() {
  std::string out = "| signature | judge | class | finding file expects | what it asks |\n|---|---|---|---|---|\n";
  for (const props::JudgeRow& row : props::judges()) {
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", row.prefix, row.name, props::finding_class_name(row.finding_class),
                       props::expectation_name(row.expectation), row.doc);
  }
  return out;
}

TEST(Findings, TheReadmeListsExactlyTheJudgesOfTheTable) {
  const std::string readme = read_text(std::string(SHARDCHECK_SOURCE_DIR) + "/docs/guide/cli.md");
  const std::string begin = "<!-- findings.def: begin -->\n";
  const std::string end = "<!-- findings.def: end -->";
  const auto from = readme.find(begin);
  const auto to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/guide/cli.md has no findings.def table";
  ASSERT_NE(to, std::string::npos);
  const std::string listed = readme.substr(from + begin.size(), to - from - begin.size());
  EXPECT_EQ(listed, rendered_table()) << "paste this between the findings.def markers of docs/guide/cli.md:\n" << rendered_table();
}

TEST(Findings, EveryJudgeHasAUniquePrefixAndNameAndADocLine) {
  std::set<std::string_view> prefixes;
  std::set<std::string_view> names;
  for (const props::JudgeRow& row : props::judges()) {
    EXPECT_TRUE(prefixes.insert(row.prefix).second) << row.prefix;
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_FALSE(row.doc.empty()) << row.name;
    EXPECT_EQ(props::judge_named(row.name), row.id) << row.name;
    EXPECT_EQ(&props::judge_row(row.id), &row) << row.name;
  }
  EXPECT_EQ(props::judge_named("no_such_judge"), std::nullopt);
}

TEST(Findings, SignaturesAreThePrefixAndTheDetail) {
  EXPECT_EQ(props::signature_of(JudgeId::silently_wrong, "rebuild:replicated/none"),
            "silently-wrong:rebuild:replicated/none");
  EXPECT_EQ(props::signature_of(JudgeId::json_readings, ""), "json:readings-differ");
  const props::Finding finding = props::make_finding(JudgeId::worker_timeout, "segmented/none", "slow", Case{});
  EXPECT_EQ(finding.judge, JudgeId::worker_timeout);
  EXPECT_EQ(finding.signature, "timeout:segmented/none");
  EXPECT_EQ(finding.message, "slow");
}

// Two ranks, one element each, and the shards agree with the map: valid.
Case valid_case() {
  auto c = decode_case_text(R"({"shardcheck_case": 1, "name": "valid", "map": {"logical_shape": [2], "ranks": {
    "0": {"shard_shape": [1], "pieces": [{"shape": [1], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]},
    "1": {"shard_shape": [1], "pieces": [{"shape": [1], "source": [1, [1]], "dest": [0, [1]], "locations": [1]}]}}}})");
  EXPECT_TRUE(c.ok());
  return c.value();
}

// Both ranks write element 0; element 1 is never written: refused, uncovered (condition
// 5 comes before condition 6's "twice" in the reference model's order).
Case colliding_case() {
  Case c = valid_case();
  c.truth = c.map;
  c.map.ranks[1].pieces[0].source.offset = 0;
  return c;
}

props::FoundWith found_with(Policy policy, std::string target = "") {
  props::FoundWith found;
  found.policy = policy;
  found.target = std::move(target);
  found.by = "a test";
  return found;
}

TEST(Findings, AFalseRefusalExpectsTheTensorUnderBothPolicies) {
  const props::Finding finding = props::make_finding(JudgeId::false_refusal, "rebuild:x/none", "refused", valid_case());
  const Json file = props::finding_case_file(finding, found_with(Policy::legacy));
  EXPECT_EQ(file.at("expect"), "exact");
  EXPECT_EQ(file.at("legacy").at("expect"), "exact");
  EXPECT_EQ(file.at("policy"), "legacy");
  EXPECT_FALSE(file.contains("target"));
  EXPECT_EQ(file.at("judge"), "false_refusal");
  EXPECT_EQ(file.at("signature"), "false-refusal:rebuild:x/none");
  EXPECT_EQ(file.at("name"), "false-refusal:rebuild:x/none");
  EXPECT_EQ(file.at("comment"), "found by a test: refused");
  EXPECT_EQ(props::recorded_target(file), "legacy");
}

TEST(Findings, ASilentlyWrongTensorUnderLegacyExpectsStrictToRefuseAndLegacyToStayWrong) {
  const props::Finding finding = props::make_finding(JudgeId::silently_wrong, "rebuild:x/y", "WRONG", colliding_case());
  const Json file = props::finding_case_file(finding, found_with(Policy::legacy));
  EXPECT_EQ(file.at("expect"), "refused");
  EXPECT_EQ(file.at("legacy").at("expect"), "wrong");
  const Json strict = props::finding_case_file(finding, found_with(Policy::strict));
  EXPECT_EQ(strict.at("expect"), "refused");
  EXPECT_FALSE(strict.contains("legacy")) << strict.dump();
}

TEST(Findings, ATargetFaultExpectsWhatTheReferenceModelDecides) {
  const std::string target = "exec:some-implementation";
  const Json refused = props::finding_case_file(
      props::make_finding(JudgeId::target_crash, "rebuild:exit-3:x/y", "died", colliding_case()),
      found_with(Policy::strict, target));
  EXPECT_EQ(refused.at("expect"), "refused");
  EXPECT_EQ(refused.at("expect_error"), "uncovered");
  EXPECT_EQ(refused.at("target"), target);
  EXPECT_FALSE(refused.contains("policy"));
  EXPECT_EQ(props::recorded_target(refused), target);
  const Json exact = props::finding_case_file(
      props::make_finding(JudgeId::target_timeout, "rebuild:slow:x/none", "hung", valid_case()),
      found_with(Policy::strict, target));
  EXPECT_EQ(exact.at("expect"), "exact");
}

TEST(Findings, ACaseWithExpectationsOfItsOwnKeepsThem) {
  Case c = colliding_case();
  c.expect = Outcome::refused;
  c.accept_errors = {ErrorKind::twice, ErrorKind::uncovered};
  const Json file =
      props::finding_case_file(props::make_finding(JudgeId::silently_wrong, "d", "m", c), found_with(Policy::strict));
  EXPECT_EQ(file.at("expect"), "refused");
  EXPECT_FALSE(file.contains("expect_error")) << file.dump();
  EXPECT_EQ(file.at("accept_errors"), Json::array({"twice", "uncovered"}));
}

TEST(Findings, AWorkerDeathExpectsNothing) {
  const Json file = props::finding_case_file(props::make_finding(JudgeId::worker_crash, "SIGSEGV:x/y", "died", valid_case()),
                                             found_with(Policy::strict));
  EXPECT_FALSE(file.contains("expect")) << file.dump();
  EXPECT_EQ(file.at("judge"), "worker_crash");
}

}  // namespace
