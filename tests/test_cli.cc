// Runs the shardcheck executable on temp files and corpus files and checks what it
// prints and how it exits: 0 nothing found, 1 refused / silently wrong / not as
// expected, 2 unreadable input or bad usage.
//
// Long file: one test binary per tests/test_*.cc; these tests share the CliTest fixture
// (a temp folder, the executable, legacy shards), and a split would add a binary and a link.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Ran {
  int exit_code = -1;
  std::string out;
};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'')
      q += "'\\''";
    else
      q += ch;
  }
  return q + "'";
}

// stderr is dropped, unless asked for, so that stdout assertions see only what a script
// would parse.
Ran shardcheck(const std::string& args, bool with_stderr = false) {
  std::string command = quoted(SHARDCHECK_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  Ran run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  int status = pclose(pipe);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

std::string corpus(const std::string& name) {
  return quoted(std::string(SHARDCHECK_SOURCE_DIR) + "/corpus/regressions/" + name);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardcheck-cli-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return quoted(path.string());
  }
  fs::path dir_;
};

const std::string kValidMap = R"({"logical_shape": [4, 6],
 "ranks": {
   "0": {"shard_shape": [4, 4],
         "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}]},
   "1": {"shard_shape": [4, 2],
         "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}]}}})";

// Contract 6.5: two pieces write shard address 0.
const std::string kCollidingMap = R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4],
  "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]},
             {"shape": [2], "source": [2, [1]], "dest": [0, [1]], "locations": [0]}]}}})";

TEST_F(CliTest, CheckValidMapExitsZero) {
  Ran run = shardcheck("check " + write("valid.json", kValidMap));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "valid\n");
}

TEST_F(CliTest, CheckRefusedMapExitsOne) {
  Ran run = shardcheck("check " + write("bad.json", kCollidingMap));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out.rfind("refused twice: ", 0), 0u) << run.out;
  EXPECT_EQ(run.out.find('\n'), run.out.size() - 1) << "one line per parameter";
}

TEST_F(CliTest, CheckMalformedBareMapIsRefusedFormat) {
  Ran run = shardcheck("check " + write("m.json", R"({"logical_shape": "x", "ranks": {}})"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out.rfind("refused format: ", 0), 0u) << run.out;
}

TEST_F(CliTest, CheckEnvelopeReportsEveryParameter) {
  std::string envelope = R"({"version": 1, "params": {"a.weight": )" + kValidMap +
                         R"(, "b.bias": {"logical_shape": [4], "ranks": 7}, "c.weight": )" + kCollidingMap + "}}";
  Ran run = shardcheck("check " + write("env.json", envelope));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.out.find("a.weight: valid\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("b.bias: refused format: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("c.weight: refused twice: "), std::string::npos) << run.out;
}

// A key given twice or a number out of range inside one parameter's map is that
// parameter's refusal: the checkpoint's other maps are still judged (exit 1, not 2).
TEST_F(CliTest, CheckEnvelopeTextJsonCannotHoldInOneParameterHidesNoOther) {
  std::string envelope = R"({"version": 1, "params": {"a.weight": )" + kValidMap +
                         R"(, "b.bias": {"logical_shape": [4], "logical_shape": [4], "ranks": {}}, "c.weight": )" +
                         kCollidingMap + R"(, "d.bias": {"logical_shape": [1e400], "ranks": {}}}})";
  Ran run = shardcheck("check " + write("env.json", envelope));
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.out.find("a.weight: valid\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("b.bias: refused format: $.params[\"b.bias\"].logical_shape: "), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("c.weight: refused twice: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("d.bias: refused format: "), std::string::npos) << run.out;
}

TEST_F(CliTest, CheckBareMapTextJsonCannotHoldIsRefusedFormat) {
  Ran run = shardcheck("check " + write("m.json", R"({"logical_shape": [4], "logical_shape": [4], "ranks": {}})"));
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_EQ(run.out.rfind("refused format: $.logical_shape: ", 0), 0u) << run.out;
}

TEST_F(CliTest, CheckEnvelopeAllValidExitsZero) {
  std::string envelope = R"({"version": 1, "params": {"x": )" + kValidMap + "}}";
  Ran run = shardcheck("check " + write("env.json", envelope));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "x: valid\n");
}

// Exit 1 when any parameter is refused, wherever it stands in the envelope: here the
// refused one comes first and a valid one last.
TEST_F(CliTest, CheckEnvelopeExitsOneWhenAnEarlierParameterIsRefused) {
  const std::string envelope = R"({"version": 1, "params": {"a.weight": )" + kCollidingMap + R"(, "b.bias": )" +
                               kValidMap + "}}";
  Ran run = shardcheck("check " + write("env.json", envelope));
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.out.find("a.weight: refused twice: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("b.bias: valid\n"), std::string::npos) << run.out;
  Ran json = shardcheck("check --json " + write("env2.json", envelope));
  EXPECT_EQ(json.exit_code, 1) << json.out;
}

TEST_F(CliTest, CheckUnreadableInputExitsTwo) {
  EXPECT_EQ(shardcheck("check " + quoted((dir_ / "missing.json").string())).exit_code, 2);
  EXPECT_EQ(shardcheck("check " + write("syntax.json", R"({"logical_shape": [4],)")).exit_code, 2);
  EXPECT_EQ(shardcheck("check " + write("array.json", "[1, 2]")).exit_code, 2);
  Ran newer = shardcheck("check " + write("v2.json", R"({"version": 2, "params": {}})"));
  EXPECT_EQ(newer.exit_code, 2);
  EXPECT_EQ(newer.out, "");
}

// --- input limits and large maps -------------------------------------------------

// A valid map of `rows` one-row pieces dealt out to `ranks` ranks in turn, in DeepSpeed's
// spelling; `bad_row`'s piece writes its rank's first shard row instead of its own.
std::string row_gather_text(long rows, int ranks, long bad_row = -1) {
  std::string out = "{\"logical_shape\": [" + std::to_string(rows) + ", 8], \"ranks\": {";
  for (int rank = 0; rank < ranks; ++rank) {
    const long held = rows / ranks + (rank < rows % ranks ? 1 : 0);
    out += (rank > 0 ? ", \"" : "\"") + std::to_string(rank) + "\": {\"shard_shape\": [" + std::to_string(held) +
           ", 8], \"pieces\": [";
    for (long i = 0; i < held; ++i) {
      const long row = i * ranks + rank;
      out += (i > 0 ? ", " : "") + std::string("{\"shape\": [1, 8], \"source\": [") + std::to_string(row * 8) +
             ", [8, 1]], \"dest\": [" + std::to_string(row == bad_row ? 0 : i * 8) + ", [8, 1]], \"locations\": [" +
             std::to_string(rank) + "]}";
    }
    out += "]}";
  }
  return out + "}}";
}

TEST_F(CliTest, MaxInputBytesRefusesALargerFileNamingTheLimit) {
  const std::string map = write("valid.json", kValidMap);
  const std::string size = std::to_string(kValidMap.size());
  const std::string expected = "the input is " + size + " bytes, more than the limit of 100 bytes (by default an " +
                               "eighth of this machine's memory; --max-input-bytes on the command line or " +
                               "max_input_bytes= in Python raises it)\n";
  for (const std::string& args : {"check --max-input-bytes 100 " + map, "check --json --max-input-bytes 100 " + map,
                                   "digest --max-input-bytes 100 " + map, "plan --max-input-bytes 100 " + map + " " + map}) {
    Ran run = shardcheck(args, true);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_NE(run.out.find(": format: $: " + expected), std::string::npos) << args << "\n" << run.out;
  }
  Ran raised = shardcheck("check --max-input-bytes " + size + " " + map);
  EXPECT_EQ(raised.exit_code, 0);
  EXPECT_EQ(raised.out, "valid\n");
  Ran repro = shardcheck("repro --max-input-bytes 100 " + corpus("spec6-1-two-ranks-one-block.json"), true);
  EXPECT_EQ(repro.exit_code, 2);
  EXPECT_NE(repro.out.find("more than the limit of 100 bytes"), std::string::npos) << repro.out;
  EXPECT_EQ(shardcheck("repro --max-input-bytes 100000 " + corpus("spec6-1-two-ranks-one-block.json")).exit_code, 0);
  for (const char* bad : {"0", "-1", "4294967296", "1e6"}) {
    Ran run = shardcheck(std::string("check --max-input-bytes ") + bad + " " + map, true);
    EXPECT_EQ(run.exit_code, 2) << bad;
    EXPECT_NE(run.out.find("--max-input-bytes must be"), std::string::npos) << run.out;
  }
}

TEST_F(CliTest, CheckReadsALargeMap) {
  // 100,000 pieces: read with its pieces taken off the tape as they close, and checked.
  Ran valid = shardcheck("check " + write("large.json", row_gather_text(100000, 8)), true);
  EXPECT_EQ(valid.exit_code, 0);
  EXPECT_EQ(valid.out, "valid\n") << "nothing on stderr when it is not a terminal";
  Ran refused = shardcheck("check --json " + write("bad.json", row_gather_text(100000, 8, 99993)));
  EXPECT_EQ(refused.exit_code, 1);
  const auto verdict = nlohmann::json::parse(refused.out);
  EXPECT_EQ(verdict["verdict"], "refused");
  EXPECT_EQ(verdict["kind"], "twice") << refused.out;
  EXPECT_EQ(verdict["rank"], 1) << refused.out;
}

TEST_F(CliTest, BadUsageExitsTwo) {
  EXPECT_EQ(shardcheck("").exit_code, 2);
  EXPECT_EQ(shardcheck("check").exit_code, 2);
  EXPECT_EQ(shardcheck("frobnicate").exit_code, 2);
  EXPECT_EQ(shardcheck("check --nope " + write("v.json", kValidMap)).exit_code, 2);
  EXPECT_EQ(shardcheck("repro " + corpus("spec6-1-two-ranks-one-block.json") + " --policy lax").exit_code, 2);
  EXPECT_EQ(shardcheck("repro " + corpus("spec6-1-two-ranks-one-block.json") + " --oracle x").exit_code, 2);
}

TEST_F(CliTest, HelpAndVersionExitZero) {
  Ran help = shardcheck("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("check"), std::string::npos);
  EXPECT_NE(help.out.find("repro"), std::string::npos);
  Ran version = shardcheck("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("shardcheck ", 0), 0u) << version.out;
}

TEST_F(CliTest, ReproStrictRefusalExitsZero) {
  Ran run = shardcheck("repro " + corpus("spec6-6-column-split-collision.json"));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out.rfind("refused twice: ", 0), 0u) << run.out;
  EXPECT_EQ(run.out.find("expectation not met"), std::string::npos);
}

TEST_F(CliTest, ReproLegacySilentlyWrongExitsOneAndShowsTheDifference) {
  Ran run = shardcheck("repro " + corpus("spec6-5-two-pieces-one-address.json") + " --policy legacy");
  EXPECT_EQ(run.exit_code, 1);
  // F is markers; legacy writes rank 0's addresses 0,1 into elements 2,3 as well.
  EXPECT_EQ(run.out.rfind("WRONG: rebuild element 2 expected ", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("(0x"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" got "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("2 of 4 elements differ"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("expectation not met"), std::string::npos) << run.out;
}

TEST_F(CliTest, ReproJsonIsOneObject) {
  Ran run = shardcheck("repro " + corpus("spec6-4-different-data.json") + " --json");
  EXPECT_EQ(run.exit_code, 0);
  auto json = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << run.out;
  EXPECT_EQ(json["verdict"], "refused");
  EXPECT_EQ(json["kind"], "different_data");
  EXPECT_EQ(json["policy"], "strict");
  EXPECT_EQ(json["valid_layout"], false);
  EXPECT_EQ(json["matches_expectation"], true);
  EXPECT_EQ(json["message"].template get<std::string>().rfind("refused different_data: ", 0), 0u);
  ASSERT_EQ(json["ops"].size(), 1u);
  EXPECT_EQ(json["ops"][0]["op"], "rebuild");
}

TEST_F(CliTest, ReproJsonShowsLegacyDifference) {
  Ran run = shardcheck("repro " + corpus("spec6-7-dest-wraps-row.json") + " --policy legacy --json");
  EXPECT_EQ(run.exit_code, 1);
  auto json = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << run.out;
  EXPECT_EQ(json["verdict"], "wrong");
  EXPECT_FALSE(json.contains("kind"));
  const auto& diff = json["ops"][0]["difference"];
  EXPECT_EQ(diff["element"], 8);  // the element written through the colliding address
  EXPECT_EQ(diff["count"], 1);
  // Expected is F's marker at element 8; actual is what legacy's output holds there (the
  // marker of element 2, written last through the colliding address).
  EXPECT_EQ(diff["expected"], "0x3b800008");
  EXPECT_EQ(diff["actual"], "0x3b800002");
  EXPECT_EQ(diff["actual"], json["ops"][0]["output"][8]);
  EXPECT_EQ(diff["expected_value"], 0.0039062537252902985);
  EXPECT_EQ(diff["actual_value"], 0.003906250931322575);
}

// Contract 8: with a scale that is not a power of two the expected tensor may differ from
// F, and --json says where, with F's bits and the expected bits each under its own name.
TEST_F(CliTest, ReproJsonSaysWhereTheExpectedTensorIsNotF) {
  Ran run = shardcheck("repro " + corpus("reported-scale-rounds-expected-differs.json") + " --json");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  auto json = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << run.out;
  EXPECT_EQ(json["verdict"], "exact");
  const auto& d = json["expected_differs_from_full"];
  EXPECT_EQ(d["element"], 2);
  EXPECT_EQ(d["full"], "0x447a8000");
  EXPECT_EQ(d["expected"], "0x447a8001");
  EXPECT_EQ(d["count"], 1);
  EXPECT_NE(d["reason"].template get<std::string>().find("the scale 0.1 is not a power of two"), std::string::npos)
      << d.dump();
}

TEST_F(CliTest, ReproValidCaseIsExact) {
  Ran run = shardcheck("repro " + corpus("valid-spec5-sub-param.json"));
  EXPECT_EQ(run.exit_code, 0);
  // The verdict, then whether it is what the case expects.
  EXPECT_EQ(run.out, "exact\nexpectation met: exact\n");
}

TEST_F(CliTest, ReproExpectationMismatchExitsOne) {
  const std::string truth = R"(, "truth": {"logical_shape": [4], "ranks": {"0": {"shard_shape": [4],
    "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})";
  std::string text =
      R"({"shardcheck_case": 1, "name": "mismatch", "map": )" + kCollidingMap + truth + R"(, "expect": "exact"})";
  Ran run = shardcheck("repro " + write("case.json", text));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.out.find("refused twice: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\nexpectation not met: "), std::string::npos) << run.out;

  std::string kind = R"({"shardcheck_case": 1, "name": "kind", "map": )" + kCollidingMap + truth +
                     R"(, "expect": "refused", "expect_error": "holders"})";
  Ran wrong_kind = shardcheck("repro " + write("kind.json", kind));
  EXPECT_EQ(wrong_kind.exit_code, 1);
  EXPECT_NE(wrong_kind.out.find("expectation not met: "), std::string::npos) << wrong_kind.out;
}

TEST_F(CliTest, ReproLegacyExpectationMismatchExitsOne) {
  // contract 6.3 in order (r1, r0): legacy refuses, which this file claims it does not.
  std::string text = R"({"shardcheck_case": 1, "name": "x", "map": {"logical_shape": [4], "ranks": {
      "1": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [1]}]},
      "0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0, 1]}]}}},
    "shards": {"0": [1, 2, 3, 4], "1": [5, 6, 7, 8]}, "legacy": {"expect": "exact"}})";
  Ran run = shardcheck("repro " + write("legacy.json", text) + " --policy legacy");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out.rfind("refused ", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("expectation not met: legacy expected exact"), std::string::npos) << run.out;
}

TEST_F(CliTest, ReproUnreadableOrUnusableCaseExitsTwo) {
  // The map the case says wrote the shards is itself refused: nothing can be judged.
  std::string refused_truth =
      R"({"shardcheck_case": 1, "name": "x", "map": )" + kValidMap + R"(, "truth": )" + kCollidingMap + "}";
  Ran unusable = shardcheck("repro " + write("refused_truth.json", refused_truth));
  EXPECT_EQ(unusable.exit_code, 2);
  EXPECT_EQ(unusable.out, "");
  Ran said = shardcheck("repro " + write("refused_truth.json", refused_truth), true);
  EXPECT_NE(said.out.find(": twice: "), std::string::npos) << said.out;
  EXPECT_NE(said.out.find(": in the truth map, "), std::string::npos) << said.out;
  EXPECT_EQ(shardcheck("repro " + quoted((dir_ / "none.json").string())).exit_code, 2);
  EXPECT_EQ(shardcheck("repro " + write("syntax.json", "{")).exit_code, 2);
  EXPECT_EQ(shardcheck("repro " + write("notcase.json", kValidMap)).exit_code, 2);
  const std::string head = R"({"shardcheck_case": 1, "name": "x")";
  EXPECT_EQ(shardcheck("repro " + write("nomap.json", head + "}")).exit_code, 2);
  EXPECT_EQ(shardcheck("repro " + write("dtype.json", head + R"(, "map": )" + kValidMap + R"(, "dtype": "float8"})"))
                .exit_code,
            2);
  EXPECT_EQ(shardcheck("repro " + write("fit.json", head + R"(, "map": )" + kCollidingMap +
                                                        R"(, "dtype": "int8", "full": [1, 2, 3, 300]})"))
                .exit_code,
            2);
  // Six values for a 24-element F: the case itself is broken.
  std::string text = R"({"shardcheck_case": 1, "name": "x", "map": )" + kValidMap + R"(, "full": [1, 2, 3, 4, 5, 6]})";
  Ran run = shardcheck("repro " + write("count.json", text), true);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("shape: "), std::string::npos) << run.out;
}

// `repro DIR`: one line per case and a summary; exit 2 if any case could not be
// replayed, even when another case failed (else 1 if any failed, else 0).
TEST_F(CliTest, ReproFolderExitsTwoWhenACaseCannotBeReplayedEvenBesideAFailure) {
  const std::string map = R"({"logical_shape": [2], "ranks": {"0": {"shard_shape": [1],
    "pieces": [{"shape": [1], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})";
  fs::create_directories(dir_ / "cases");
  write("cases/a-fails.json", R"({"shardcheck_case": 1, "name": "fails", "expect": "exact", "map": )" + map + "}");
  write("cases/b-passes.json", R"({"shardcheck_case": 1, "name": "passes", "expect": "refused", "map": )" + map + "}");
  const std::string folder = quoted((dir_ / "cases").string());
  Ran failing = shardcheck("repro " + folder);
  EXPECT_EQ(failing.exit_code, 1) << failing.out;
  EXPECT_NE(failing.out.find("2 case files: 1 passed, 1 failed, 0 could not be replayed\n"), std::string::npos)
      << failing.out;
  write("cases/c-broken.json", "{not json");
  Ran broken = shardcheck("repro " + folder);
  EXPECT_EQ(broken.exit_code, 2) << broken.out;
  EXPECT_EQ(broken.out.rfind("FAIL ", 0), 0u) << broken.out;
  EXPECT_NE(broken.out.find("\nPASS "), std::string::npos) << broken.out;
  EXPECT_NE(broken.out.find("\nERROR "), std::string::npos) << broken.out;
  EXPECT_NE(broken.out.find("3 case files: 1 passed, 1 failed, 1 could not be replayed\n"), std::string::npos)
      << broken.out;
}

// Contract 9: every reported map gets a verdict, with the exit status of any
// other verdict (0 refused as expected, 1 silently wrong or not as expected).
TEST_F(CliTest, ReproReportedMapsAlwaysGetAVerdict) {
  const std::pair<const char*, const char*> strict_kinds[] = {
      {"reported-float-extent.json", "format"},      {"reported-string-extent.json", "format"},
      {"reported-two-keys-one-rank.json", "format"}, {"reported-replica-holder-lists-no-pieces.json", "holders"},
      {"reported-zero-scale.json", "scale"},         {"reported-dest-view-overlaps-itself.json", "itself"},
      {"reported-unwritable-rank.json", "itself"},   {"reported-negative-logical-extent.json", "format"}};
  for (const auto& [name, kind] : strict_kinds) {
    Ran run = shardcheck("repro " + corpus(name) + " --json");
    EXPECT_EQ(run.exit_code, 0) << name << ": " << run.out;
    auto json = nlohmann::json::parse(run.out, nullptr, false);
    ASSERT_FALSE(json.is_discarded()) << name << ": " << run.out;
    EXPECT_EQ(json["verdict"], "refused") << name;
    EXPECT_EQ(json["kind"], kind) << name;
    EXPECT_EQ(json["matches_expectation"], true) << name;
    Ran legacy = shardcheck("repro " + corpus(name) + " --json --policy legacy");
    auto old = nlohmann::json::parse(legacy.out, nullptr, false);
    ASSERT_FALSE(old.is_discarded()) << name << ": " << legacy.out;
    EXPECT_EQ(old["matches_expectation"], true) << name << ": " << legacy.out;
    EXPECT_EQ(legacy.exit_code, old["verdict"] == "wrong" ? 1 : 0) << name;
  }
}

TEST_F(CliTest, ReproReportedMapWithoutTruthOrShardsRuns) {
  // Contract 6.5's map alone: strict refuses it, legacy converts the shards that very map
  // wrote and is caught silently wrong.
  std::string text = R"({"shardcheck_case": 1, "name": "alone", "map": )" + kCollidingMap +
                     R"(, "expect": "refused", "expect_error": "twice"})";
  const std::string path = write("alone.json", text);
  Ran strict = shardcheck("repro " + path);
  EXPECT_EQ(strict.exit_code, 0);
  EXPECT_EQ(strict.out.rfind("refused twice: ", 0), 0u) << strict.out;
  Ran legacy = shardcheck("repro " + path + " --policy legacy");
  EXPECT_EQ(legacy.exit_code, 1);
  EXPECT_EQ(legacy.out.rfind("WRONG: rebuild element 0 ", 0), 0u) << legacy.out;
  // A map that does not decode is a refusal too, and its expectation is judged.
  std::string undecodable = R"({"shardcheck_case": 1, "name": "u", "map": {"logical_shape": [4.5],
      "ranks": {}}, "expect": "exact"})";
  Ran mismatch = shardcheck("repro " + write("undecodable.json", undecodable));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_EQ(mismatch.out.rfind("refused format: $.map.logical_shape[0]: ", 0), 0u) << mismatch.out;
  EXPECT_NE(mismatch.out.find("expectation not met: expected exact, got refused"), std::string::npos) << mismatch.out;
}

TEST_F(CliTest, ReproSameMapOracleMissesCancellingErrors) {
  // Swapped destinations round-trip through the same map: only the truth oracle sees it.
  Ran truth = shardcheck("repro " + corpus("valid-layout-swapped-destinations.json"));
  EXPECT_EQ(truth.exit_code, 1);
  EXPECT_EQ(truth.out.rfind("WRONG: ", 0), 0u) << truth.out;
  Ran same = shardcheck("repro " + corpus("valid-layout-swapped-destinations.json") + " --oracle same-map");
  EXPECT_EQ(same.out.rfind("exact\n", 0), 0u) << same.out;
}

// ---- shardcheck digest ------------------------------------------------------------------

std::string floats(std::initializer_list<float> xs) {
  std::string bytes;
  for (float x : xs) bytes.append(reinterpret_cast<const char*>(&x), sizeof x);
  return bytes;
}

// F (2, 4) = 1..8 as float32, column split over two ranks. Its digest, from the Python
// definition in test_digest.cc over the float32 bits of 1..8: 0x3c4d27bf99d659a0.
const std::string kSplitMap = R"({"logical_shape": [2, 4], "ranks": {
  "0": {"shard_shape": [2, 2], "pieces": [{"shape": [2, 2], "source": [0, [4, 1]], "dest": [0, [2, 1]], "locations": [0]}]},
  "1": {"shard_shape": [2, 2], "pieces": [{"shape": [2, 2], "source": [2, [4, 1]], "dest": [0, [2, 1]], "locations": [1]}]}},
  "content_digests": {"param": "0x3c4d27bf99d659a0", "exp_avg": "0x0000000000000001"}})";

std::uint64_t hex_after(const std::string& out, const std::string& prefix) {
  const auto at = out.find(prefix);
  if (at == std::string::npos) return 0;
  return std::stoull(out.substr(at + prefix.size(), 18), nullptr, 16);
}

TEST_F(CliTest, DigestOfRawShardsAndTheirShares) {
  const std::string map = write("split.json", kSplitMap);
  const std::string s0 = write("s0.bin", floats({1, 2, 5, 6}));
  const std::string s1 = write("s1.bin", floats({3, 4, 7, 8}));
  Ran run = shardcheck("digest " + map + " " + s0 + " " + s1 + " --state param");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.out.rfind("digest 0x3c4d27bf99d659a0\n", 0), 0u) << run.out;
  EXPECT_EQ(hex_after(run.out, "rank 0 share ") + hex_after(run.out, "rank 1 share "), 0x3c4d27bf99d659a0ull)
      << run.out;
  EXPECT_NE(run.out.find("recorded param 0x3c4d27bf99d659a0 matches"), std::string::npos) << run.out;
  // The same with ranks named, in any order.
  Ran named = shardcheck("digest " + map + " 1=" + s1 + " 0=" + s0);
  EXPECT_EQ(named.exit_code, 0);
  EXPECT_EQ(named.out.rfind("digest 0x3c4d27bf99d659a0\n", 0), 0u) << named.out;
  // Shards swapped: another tensor, and the recorded value says so.
  Ran swapped = shardcheck("digest " + map + " " + s1 + " " + s0 + " --state param");
  EXPECT_EQ(swapped.exit_code, 1);
  EXPECT_NE(swapped.out.find("DIFFERS"), std::string::npos) << swapped.out;
  // No entry for the state asked for.
  Ran none = shardcheck("digest " + map + " " + s0 + " " + s1 + " --state exp_avg_sq");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.out.find("recorded exp_avg_sq: none"), std::string::npos) << none.out;
}

TEST_F(CliTest, DigestRefusalsAndUsage) {
  const std::string map = write("split.json", kSplitMap);
  const std::string s0 = write("s0.bin", floats({1, 2, 5, 6}));
  // A missing shard is the conversion's refusal (exit 1); unreadable or ragged input is usage (2).
  Ran missing = shardcheck("digest " + map + " 0=" + s0);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.out.rfind("refused shape: ", 0), 0u) << missing.out;
  EXPECT_EQ(shardcheck("digest " + map + " " + s0 + " " + write("odd.bin", "abc")).exit_code, 2);
  EXPECT_EQ(shardcheck("digest " + map + " " + s0 + " " + quoted((dir_ / "nope.bin").string())).exit_code, 2);
  EXPECT_EQ(shardcheck("digest " + map + " " + s0 + " " + s0 + " " + s0).exit_code, 2);
  EXPECT_EQ(shardcheck("digest " + map + " --dtype float7 " + s0).exit_code, 2);
  Ran refused = shardcheck("digest " + write("bad.json", kCollidingMap) + " " + s0);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.out.rfind("refused twice: ", 0), 0u) << refused.out;
}

TEST_F(CliTest, DigestOfACaseFile) {
  // The case's shards are written by its truth map; through the swapped map under test
  // they make another tensor, which the truth digest line shows.
  Ran run = shardcheck("digest " + corpus("valid-layout-swapped-destinations.json"));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.out.rfind("digest 0x", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("rank 0 share 0x"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("truth digest 0x"), std::string::npos) << run.out;
  EXPECT_EQ(
      shardcheck("digest " + corpus("valid-layout-swapped-destinations.json") + " " + write("s0.bin", floats({1})))
          .exit_code,
      2);
  // The twin records the producer's digest: the map under test does not give it back.
  Ran twin = shardcheck("digest " + corpus("valid-layout-swapped-destinations-digest.json"));
  EXPECT_EQ(twin.exit_code, 1) << twin.out;
  EXPECT_NE(twin.out.find("truth digest 0xce9a0aa78c2270e0"), std::string::npos) << twin.out;
  EXPECT_NE(twin.out.find("recorded digest 0xce9a0aa78c2270e0 DIFFERS"), std::string::npos) << twin.out;
}

// --- numeric options: exact parsing, errors in plain words -------------------------

// The whole of stderr for a usage error: the sentence, CLI11's pointer to --help, and
// no CLI11 range on a double ("0.000000 to 1797...").
void expect_usage_error(const Ran& run, const std::string& sentence) {
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_EQ(run.out.rfind(sentence + "\n", 0), 0u) << run.out;
  EXPECT_EQ(run.out.find("0.000000"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("1797693"), std::string::npos) << run.out;
}

TEST_F(CliTest, CampaignRangeErrorsAreSentences) {
  const std::string out = " --quiet --no-isolate --jobs 1 --out " + quoted((dir_ / "out").string());
  expect_usage_error(shardcheck("campaign --cases -1" + out, true), "--cases must be >= 0, got -1");
  expect_usage_error(shardcheck("campaign --cases 1.5" + out, true), "--cases must be a whole number, got 1.5");
  expect_usage_error(shardcheck("campaign --cases 99999999999999999999" + out, true),
                     "--cases must be <= 9223372036854775807, got 99999999999999999999");
  expect_usage_error(shardcheck("campaign --cases 5 --jobs -1 --quiet", true),
                     "--jobs must be between 0 and 4096, got -1");
  expect_usage_error(shardcheck("campaign --time -1" + out, true),
                     "--time must be a number of seconds > 0 and <= 1000000000, got -1");
  expect_usage_error(shardcheck("campaign --time nan" + out, true),
                     "--time must be a number of seconds > 0 and <= 1000000000, got nan");
  expect_usage_error(shardcheck("campaign --cases 5 --max-elements 0" + out, true),
                     "--max-elements must be between 1 and 1048576, got 0");
  expect_usage_error(shardcheck("campaign --cases 5 --case-time-limit 0" + out, true),
                     "--case-time-limit must be a number of seconds > 0 and <= 1000000000, got 0");
  expect_usage_error(shardcheck("campaign --cases 5 --case-memory-limit 15" + out, true),
                     "--case-memory-limit must be between 16 and 1073741824, got 15");
  expect_usage_error(shardcheck("repro " + corpus("spec6-1-two-ranks-one-block.json") + " --target-timeout -2", true),
                     "--target-timeout must be a number of seconds > 0 and <= 1000000000, got -2");
  expect_usage_error(shardcheck("digest " + write("m.json", kValidMap) + " --scale-power 1e3", true),
                     "--scale-power must be a whole number, got 1e3");
  // Nothing ran: no output folder was made.
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

// The campaign's report.json, after a run of `cases` cases with these extra arguments.
nlohmann::json campaign_report(const fs::path& out, const std::string& args, int& exit_code) {
  Ran run = shardcheck("campaign --quiet --no-isolate --out " + quoted(out.string()) + " " + args);
  exit_code = run.exit_code;
  std::ifstream in(out / "report.json");
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, false);
}

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

TEST_F(CliTest, CampaignSeedsAreParsedExactly) {
  expect_usage_error(shardcheck("campaign --cases 1 --seed -1", true),
                     "--seed must be a whole number from 0 to 18446744073709551615, got -1");
  expect_usage_error(shardcheck("campaign --cases 1 --seed 99999999999999999999", true),
                     "--seed must be at most 18446744073709551615 (an unsigned 64-bit integer), got "
                     "99999999999999999999");
  expect_usage_error(shardcheck("campaign --cases 1 --seed 18446744073709551616", true),
                     "--seed must be at most 18446744073709551615 (an unsigned 64-bit integer), got "
                     "18446744073709551616");
  expect_usage_error(shardcheck("campaign --cases 1 --seed 0x10", true),
                     "--seed must be a whole number from 0 to 18446744073709551615, got 0x10");
  int code = -1;
  // The largest seed is taken as it is, not saturated into or wrapped from something else.
  nlohmann::json top = campaign_report(dir_ / "top", "--cases 3 --jobs 1 --seed 18446744073709551615", code);
  EXPECT_EQ(code, 0);
  ASSERT_TRUE(top.is_object());
  EXPECT_EQ(top["seed"].get<std::uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(top["cases"], 3);
  // Decimal, always: a leading zero is not octal.
  nlohmann::json ten = campaign_report(dir_ / "ten", "--cases 2 --jobs 1 --seed 010", code);
  EXPECT_EQ(code, 0);
  ASSERT_TRUE(ten.is_object());
  EXPECT_EQ(ten["seed"].get<std::uint64_t>(), 10u);
}

TEST_F(CliTest, CampaignJobsZeroMeansAllCores) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int code = -1;
  nlohmann::json report = campaign_report(dir_ / "zero", "--cases 4 --seed 1 --jobs 0", code);
  EXPECT_EQ(code, 0);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["jobs"], cores);
  nlohmann::json one = campaign_report(dir_ / "one", "--cases 4 --seed 1 --jobs 1", code);
  ASSERT_TRUE(one.is_object());
  EXPECT_EQ(one["jobs"], 1);
  // --cases 0 is a campaign of no cases, not an error.
  nlohmann::json none = campaign_report(dir_ / "none", "--cases 0 --seed 1 --jobs 1", code);
  EXPECT_EQ(code, 0);
  ASSERT_TRUE(none.is_object());
  EXPECT_EQ(none["cases"], 0);
  Ran help = shardcheck("campaign --help");
  EXPECT_NE(help.out.find("0 (the default) means all cores"), std::string::npos) << help.out;
}

// --op rebuild / --op extract: every case asks for that operation alone (a target that
// serves one is asked on every case), the report and its rerun line say so.
TEST_F(CliTest, CampaignOfOneOperationAsksOnlyForIt) {
  for (const std::string op : {"rebuild", "extract"}) {
    int code = -1;
    nlohmann::json report =
        campaign_report(dir_ / op, "--cases 60 --seed 4 --jobs 1 --reduce-evaluations 0 --op " + op, code);
    EXPECT_EQ(code, 0) << op;
    ASSERT_TRUE(report.is_object()) << op;
    EXPECT_EQ(report["op"], op);
    ASSERT_EQ(report["by_op"].size(), 1u) << report["by_op"].dump();
    EXPECT_EQ(report["by_op"][op]["cases"], 60) << report["by_op"].dump();
    std::ifstream table_file(dir_ / op / "table.txt");
    const std::string table((std::istreambuf_iterator<char>(table_file)), std::istreambuf_iterator<char>());
    EXPECT_NE(table.find(op + " alone"), std::string::npos) << table;
    EXPECT_NE(table.find("--op " + op), std::string::npos) << table;
    const nlohmann::json checkpoint = read_json_file(dir_ / op / "checkpoint.json");
    EXPECT_EQ(checkpoint["op"], op);
  }
  // Without --op, the mix: no "op" key, so that earlier readers read it as before.
  int code = -1;
  nlohmann::json mixed = campaign_report(dir_ / "mixed", "--cases 60 --seed 4 --jobs 1 --reduce-evaluations 0", code);
  ASSERT_TRUE(mixed.is_object());
  EXPECT_FALSE(mixed.contains("op"));
  EXPECT_EQ(mixed["by_op"].size(), 2u) << mixed["by_op"].dump();
  expect_usage_error(shardcheck("campaign --cases 5 --op both --out " + quoted((dir_ / "both").string()), true),
                     "shardcheck campaign: --op takes rebuild, extract or reshard (without it, cases rebuild, extract or both), got 'both'");
  EXPECT_FALSE(fs::exists(dir_ / "both"));
}

// --- a directory where a file is expected -------------------------------------------

TEST_F(CliTest, ADirectoryIsNamedAsOne) {
  const std::string dir = quoted(dir_.string());
  const std::string expected = "shardcheck: cannot read " + dir_.string() + ": it is a directory, not a file\n";
  for (const std::string& args : {"check " + dir, "check --json " + dir, "digest " + dir}) {
    Ran run = shardcheck(args, true);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_EQ(run.out, expected) << args;
  }
  // repro takes a folder of case files (`repro DIR`): one holding none says so.
  for (const std::string& args : {"repro " + dir, "repro --json " + dir}) {
    Ran run = shardcheck(args, true);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_EQ(run.out, "shardcheck repro: " + dir_.string() + " holds no case files (*.json)\n") << args;
  }
  // A directory given as a shard file: the same sentence, after the map it goes with.
  const std::string map = write("m.json", kValidMap);
  Ran shard = shardcheck("digest " + map + " 0=" + dir, true);
  EXPECT_EQ(shard.exit_code, 2);
  EXPECT_NE(shard.out.find(expected.substr(std::string("shardcheck: ").size())), std::string::npos) << shard.out;
  EXPECT_EQ(shard.out.find("JSON"), std::string::npos) << shard.out;
}

// `campaign merge` (docs/scale-out.md): the shards of one campaign merge into what the
// unsharded run reports: the same tables, the same findings (a signature found in both
// shards keeps the smallest case and adds the occurrences of both) and the same exit
// code. With seed 3, signature silently-wrong:extract:block_gather/shard_shape_inc is
// found once in each shard.
TEST_F(CliTest, CampaignMergeOfTwoShardsIsTheUnshardedRun) {
  const std::string base = "campaign --seed 3 --cases 200 --policy legacy --jobs 1 --no-isolate --quiet";
  auto out = [&](const std::string& name) { return quoted((dir_ / name).string()); };
  auto report = [&](const std::string& name) {
    std::ifstream in(dir_ / name / "report.json");
    return nlohmann::json::parse(in, nullptr, false);
  };
  Ran whole = shardcheck(base + " --out " + out("whole"));
  ASSERT_EQ(whole.exit_code, 1) << whole.out;
  for (const char* shard : {"0", "1"}) {
    Ran run = shardcheck(base + " --shard " + shard + "/2 --out " + out(std::string("shard-") + shard));
    ASSERT_EQ(run.exit_code, 1) << run.out;
  }
  const std::string signature = "silently-wrong:extract:block_gather/shard_shape_inc";
  for (const char* shard : {"shard-0", "shard-1"}) {
    const auto findings = report(shard)["findings"];
    ASSERT_TRUE(std::any_of(findings.begin(), findings.end(), [&](const nlohmann::json& f) {
      return f["signature"] == signature && f["occurrences"] == 1;
    })) << shard << " no longer finds " << signature << " once: choose another seed";
  }
  Ran merge = shardcheck("campaign merge " + out("shard-0") + " " + out("shard-1") + " --out " + out("merged"));
  EXPECT_EQ(merge.exit_code, whole.exit_code) << merge.out;
  EXPECT_NE(merge.out.find("finding: " + signature + " (2 cases)"), std::string::npos) << merge.out;
  const auto merged = report("merged");
  const auto unsharded = report("whole");
  ASSERT_TRUE(merged.is_object());
  ASSERT_TRUE(unsharded.is_object());
  for (const char* key : {"cases", "total", "by_constructor", "by_corruption", "by_refusal_kind", "by_op", "findings",
                          "failed", "shard", "seed", "complete"}) {
    EXPECT_EQ(merged[key], unsharded[key]) << key;
  }
  for (const auto& finding : unsharded["findings"]) {
    const std::string file = finding["file"].get<std::string>();
    std::ifstream a(dir_ / "whole" / file), b(dir_ / "merged" / file);
    const std::string from_whole((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    const std::string from_merge((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(from_whole.empty()) << file;
    EXPECT_EQ(from_merge, from_whole) << file;
  }
}

// --- what a campaign writes, and where -----------------------------------------------

std::set<std::string> names_in(const fs::path& folder) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) names.insert(entry.path().filename().string());
  return names;
}

// The case files a report.json lists, by name.
std::set<std::string> report_files(const fs::path& out) {
  std::ifstream in(out / "report.json");
  const auto report = nlohmann::json::parse(in, nullptr, false);
  std::set<std::string> names;
  if (!report.is_object()) return names;
  for (const auto& finding : report["findings"]) {
    names.insert(fs::path(finding["file"].get<std::string>()).filename().string());
  }
  return names;
}

// A second campaign into a used --out would mix its finding files with the first's: it is
// refused, and with --overwrite the first's outputs go before the second's come.
TEST_F(CliTest, CampaignRefusesAUsedOutUnlessOverwritten) {
  const std::string out = quoted((dir_ / "out").string());
  const std::string legacy = "campaign --policy legacy --cases 200 --jobs 1 --no-isolate --quiet --out " + out;
  ASSERT_EQ(shardcheck(legacy + " --seed 3").exit_code, 1);
  const std::set<std::string> first = names_in(dir_ / "out" / "findings");
  ASSERT_FALSE(first.empty());
  Ran refused = shardcheck(legacy + " --seed 4", true);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_EQ(refused.out, "shardcheck campaign: " + (dir_ / "out").string() +
                             " holds the outputs of an earlier run (checkpoint.json, report.json, table.txt, "
                             "report.html, " +
                             std::to_string(first.size()) +
                             " finding files); choose another --out, or give --overwrite to replace them\n");
  EXPECT_EQ(names_in(dir_ / "out" / "findings"), first) << "a refused campaign wrote nothing";
  Ran overwritten = shardcheck(legacy + " --seed 4 --overwrite");
  EXPECT_EQ(overwritten.exit_code, 1) << overwritten.out;
  const std::set<std::string> second = names_in(dir_ / "out" / "findings");
  EXPECT_EQ(second, report_files(dir_ / "out")) << "finding files the report does not list are left";
  EXPECT_NE(second, first);
  Ran both = shardcheck("campaign --resume " + out + " --overwrite", true);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.out.find("--overwrite starts a new campaign and cannot be given with --resume"), std::string::npos)
      << both.out;
}

// A report path that cannot be written is found before any case runs (exit 2, and no
// output folder made); one that fails only when written (/dev/full) makes the campaign
// incomplete (exit 3), never a verdict of PASS followed by an error, and a device is
// written in place, not replaced by a file.
TEST_F(CliTest, CampaignReportPathsAreTriedBeforeTheRun) {
  const std::string out = " --cases 20 --jobs 1 --no-isolate --quiet --out " + quoted((dir_ / "out").string());
  fs::create_directories(dir_ / "a-folder");
  const std::vector<std::pair<std::string, std::string>> unwritable{
      {"--junit /dev/full/junit.xml", "cannot write --junit /dev/full/junit.xml: Not a directory"},
      {"--markdown " + quoted((dir_ / "nowhere" / "summary.md").string()),
       "cannot write --markdown " + (dir_ / "nowhere" / "summary.md").string() + ": No such file or directory"},
      {"--junit " + quoted((dir_ / "a-folder").string()),
       "cannot write --junit " + (dir_ / "a-folder").string() + ": it is a directory, not a file"}};
  for (const auto& [flag, sentence] : unwritable) {
    Ran run = shardcheck("campaign " + flag + out, true);
    EXPECT_EQ(run.exit_code, 2) << flag;
    EXPECT_EQ(run.out, "shardcheck campaign: " + sentence + "; choose a path that can be written\n") << flag;
    EXPECT_FALSE(fs::exists(dir_ / "out")) << flag << ": the campaign started";
  }
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here: a report that fails when written is not tried";
  Ran full = shardcheck("campaign --junit /dev/full" + out);
  EXPECT_EQ(full.exit_code, 3) << full.out;
  EXPECT_NE(full.out.find("verdict: INCOMPLETE, exit 3: the outputs are incomplete: /dev/full could not be written: "
                          "No space left on device; the campaign found nothing in 20 cases; once there is room, write "
                          "them again with: shardcheck campaign --resume " +
                          (dir_ / "out").string() + " --junit /dev/full\n"),
            std::string::npos)
      << full.out;
  EXPECT_EQ(full.out.find("PASS"), std::string::npos) << full.out;
  EXPECT_TRUE(fs::is_character_file("/dev/full")) << "/dev/full was replaced";
}

// --- campaign merge vouches for what it merges ---------------------------------------

// Two shards of a legacy campaign (findings in both) in DIR/shard-0 and DIR/shard-1.
void legacy_shards(const fs::path& dir, const std::string& extra = "") {
  for (const char* shard : {"0", "1"}) {
    Ran run = shardcheck("campaign --seed 3 --cases 200 --policy legacy --jobs 1 --no-isolate --quiet --shard " +
                         std::string(shard) + "/2 --out " + quoted((dir / ("shard-" + std::string(shard))).string()) +
                         extra);
    ASSERT_EQ(run.exit_code, 1) << run.out;
  }
}

Ran merge(const fs::path& dir, const std::string& first, const std::string& extra = "") {
  return shardcheck("campaign merge " + quoted((dir / first).string()) + " " + quoted((dir / "shard-1").string()) +
                        " --out " + quoted((dir / "merged").string()) + extra,
                    true);
}

void write_json_file(const fs::path& path, const nlohmann::json& json) { std::ofstream(path) << json.dump(); }

// A finding file that is cut short, or that holds another finding's case, is refused
// naming the file (exit 2), and the merge makes no output folder. Reduced findings (the
// default) record the case they came from; unreduced ones are that case.
class MergeOfSwappedFindings : public CliTest, public ::testing::WithParamInterface<bool> {};

TEST_P(MergeOfSwappedFindings, AreRefusedNamingTheFile) {
  const bool reduced = GetParam();
  legacy_shards(dir_, reduced ? "" : " --reduce-evaluations 0");
  const auto files = names_in(dir_ / "shard-0" / "findings");
  ASSERT_GE(files.size(), 2u);
  const std::string name = *files.begin();
  fs::copy(dir_ / "shard-0", dir_ / "cut", fs::copy_options::recursive);
  const fs::path cut = dir_ / "cut" / "findings" / name;
  fs::resize_file(cut, fs::file_size(cut) / 2);
  Ran truncated = merge(dir_, "cut");
  EXPECT_EQ(truncated.exit_code, 2) << truncated.out;
  EXPECT_EQ(truncated.out.rfind("shardcheck campaign merge: " + cut.string() + " does not decode as a case file (", 0),
            0u)
      << truncated.out;
  EXPECT_FALSE(fs::exists(dir_ / "merged"));
  fs::copy(dir_ / "shard-0", dir_ / "swapped", fs::copy_options::recursive);
  const fs::path swapped = dir_ / "swapped" / "findings" / name;
  fs::copy_file(dir_ / "shard-0" / "findings" / *std::next(files.begin()), swapped,
                fs::copy_options::overwrite_existing);
  Ran other = merge(dir_, "swapped");
  EXPECT_EQ(other.exit_code, 2) << other.out;
  const std::string why = reduced ? " records a reduction from another case than case " : " is not the case file of case ";
  EXPECT_NE(other.out.find(swapped.string() + why), std::string::npos) << other.out;
  EXPECT_NE(other.out.find(" that shard 0/2 (" + (dir_ / "swapped").string() + ") records for "), std::string::npos)
      << other.out;
  EXPECT_EQ(merge(dir_, "shard-0").exit_code, 1);
}

INSTANTIATE_TEST_SUITE_P(CampaignMerge, MergeOfSwappedFindings, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Reduced" : "AsFound"; });

// Shards of one seed and count whose cases are of different operations (or run on
// different backends) are shards of different campaigns: their tables would add up to
// no campaign's.
TEST_F(CliTest, CampaignMergeRefusesShardsOfAnotherOperation) {
  legacy_shards(dir_);
  Ran reshard = shardcheck("campaign --seed 3 --cases 200 --policy legacy --op reshard --jobs 1 --no-isolate --quiet "
                           "--reduce-evaluations 0 --shard 0/2 --out " +
                               quoted((dir_ / "reshard").string()),
                           true);
  ASSERT_TRUE(reshard.exit_code == 0 || reshard.exit_code == 1) << reshard.out;
  Ran merged = merge(dir_, "reshard");
  EXPECT_EQ(merged.exit_code, 2) << merged.out;
  EXPECT_NE(merged.out.find("are shards of different campaigns: op \"reshard\" and (none)"), std::string::npos)
      << merged.out;
  EXPECT_FALSE(fs::exists(dir_ / "merged"));
  // The backend differential on another share of the cases: another campaign too.
  Ran shared = shardcheck("campaign --seed 3 --cases 200 --policy legacy --backend-share 8 --jobs 1 --no-isolate "
                          "--quiet --reduce-evaluations 0 --shard 0/2 --out " +
                              quoted((dir_ / "shared").string()),
                          true);
  ASSERT_TRUE(shared.exit_code == 0 || shared.exit_code == 1) << shared.out;
  merged = merge(dir_, "shared");
  EXPECT_EQ(merged.exit_code, 2) << merged.out;
  EXPECT_NE(merged.out.find("are shards of different campaigns: backend_share 8 and 64"), std::string::npos)
      << merged.out;
}

// A shard whose checkpoint was edited so that its findings became refusals (its resume
// would then say PASS) is refused naming the shard and the count, however the edit went.
TEST_F(CliTest, CampaignMergeRefusesAShardWhoseFindingsWereMovedToRefused) {
  legacy_shards(dir_);
  const nlohmann::json checkpoint = read_json_file(dir_ / "shard-0" / "checkpoint.json");
  ASSERT_TRUE(checkpoint.is_object());
  const std::size_t files = names_in(dir_ / "shard-0" / "findings").size();
  // Every silently wrong case counted as refused instead, and no finding on record.
  nlohmann::json moved = checkpoint;
  for (const char* section : {"by_constructor", "by_corruption", "by_refusal_kind", "by_op"}) {
    for (auto& [name, tally] : moved[section].items()) {
      tally[1] = tally[1].get<long long>() + tally[3].get<long long>();
      tally[3] = 0;
    }
  }
  moved["findings"] = nlohmann::json::array();
  fs::copy(dir_ / "shard-0", dir_ / "moved", fs::copy_options::recursive);
  write_json_file(dir_ / "moved" / "checkpoint.json", moved);
  Ran run = merge(dir_, "moved");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("shardcheck campaign merge: shard 0/2 (" + (dir_ / "moved").string() + "): findings/ holds " +
                         std::to_string(files) + " finding files its checkpoint does not record (first: "),
            std::string::npos)
      << run.out;
  // The finding files removed too: report.json still says what ran.
  fs::remove_all(dir_ / "moved" / "findings");
  run = merge(dir_, "moved");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("(" + (dir_ / "moved").string() + "): its report.json and checkpoint.json disagree on"),
            std::string::npos)
      << run.out;
  // Only the record of the findings gone: the silently wrong cases are still counted.
  nlohmann::json dropped = checkpoint;
  dropped["findings"] = nlohmann::json::array();
  fs::copy(dir_ / "shard-0", dir_ / "dropped", fs::copy_options::recursive);
  fs::remove_all(dir_ / "dropped" / "findings");
  write_json_file(dir_ / "dropped" / "checkpoint.json", dropped);
  run = merge(dir_, "dropped");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  const long long wrong = read_json_file(dir_ / "shard-0" / "report.json")["total"]["silently_wrong"];
  EXPECT_NE(run.out.find("(" + (dir_ / "dropped").string() + "): it counts " + std::to_string(wrong) +
                         " silently wrong, crashed or target-fault cases but its findings cover only 0"),
            std::string::npos)
      << run.out;
  EXPECT_FALSE(fs::exists(dir_ / "merged"));
}

// The merge's outputs follow the campaign's rules: a report path that cannot be written
// is refused before anything is merged, a used --out is refused and --overwrite replaces
// what it holds, and a file that fails when written makes the merge incomplete (exit 3).
TEST_F(CliTest, CampaignMergeOutputsFollowTheCampaignsRules) {
  legacy_shards(dir_);
  Ran unwritable = merge(dir_, "shard-0", " --junit /dev/full/junit.xml");
  EXPECT_EQ(unwritable.exit_code, 2) << unwritable.out;
  EXPECT_EQ(unwritable.out,
            "shardcheck campaign merge: cannot write --junit /dev/full/junit.xml: Not a directory; choose a path "
            "that can be written\n");
  EXPECT_FALSE(fs::exists(dir_ / "merged"));
  ASSERT_EQ(merge(dir_, "shard-0").exit_code, 1);
  std::ofstream(dir_ / "merged" / "findings" / "stale.json") << "{}";
  Ran again = merge(dir_, "shard-0");
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_NE(again.out.find((dir_ / "merged").string() + " holds the outputs of an earlier run (report.json, "
                                                        "table.txt, report.html, "),
            std::string::npos)
      << again.out;
  Ran overwritten = merge(dir_, "shard-0", " --overwrite");
  EXPECT_EQ(overwritten.exit_code, 1) << overwritten.out;
  EXPECT_EQ(names_in(dir_ / "merged" / "findings"), report_files(dir_ / "merged"));
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here: a report that fails when written is not tried";
  Ran full = merge(dir_, "shard-0", " --overwrite --markdown /dev/full");
  EXPECT_EQ(full.exit_code, 3) << full.out;
  EXPECT_NE(full.out.find("verdict: INCOMPLETE, exit 3: the outputs are incomplete: /dev/full could not be written: "
                          "No space left on device; once there is room, run the merge again with --overwrite\n"),
            std::string::npos)
      << full.out;
}

// A crash finding replays in a child process; a planted crash (a test hook of the worker,
// not of the case) does not crash again, so its file does not show its finding: refused.
TEST_F(CliTest, CampaignMergeReplaysEveryFindingFile) {
  for (const char* shard : {"0", "1"}) {
    Ran run = shardcheck("campaign --seed 41 --cases 200 --jobs 1 --quiet --plant-crash-at 100 --shard " +
                         std::string(shard) + "/2 --out " + quoted((dir_ / ("shard-" + std::string(shard))).string()));
    ASSERT_EQ(run.exit_code, shard == std::string("0") ? 1 : 0) << run.out;
  }
  Ran run = merge(dir_, "shard-0");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("/findings/crash-SIGABRT-"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(".json does not show its finding crash:SIGABRT:"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(": its case ran to the end and passed when replayed; the merge carries only findings that "
                         "replay, see for yourself with: shardcheck repro "),
            std::string::npos)
      << run.out;
}

// --- check --json -------------------------------------------------------------------

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    lines.push_back(nlohmann::json::parse(out.substr(start, end - start), nullptr, false));
    start = end + 1;
  }
  return lines;
}

const char* const kCheckJsonKeys[] = {"param", "verdict", "kind", "message", "rank",
                                      "piece", "address", "side", "path"};

TEST_F(CliTest, CheckJsonBareMaps) {
  Ran valid = shardcheck("check --json " + write("valid.json", kValidMap));
  EXPECT_EQ(valid.exit_code, 0);
  auto lines = json_lines(valid.out);
  ASSERT_EQ(lines.size(), 1u) << valid.out;
  for (const char* key : kCheckJsonKeys) EXPECT_TRUE(lines[0].contains(key)) << key;
  EXPECT_EQ(lines[0].size(), std::size(kCheckJsonKeys));
  EXPECT_EQ(lines[0]["verdict"], "valid");
  EXPECT_TRUE(lines[0]["param"].is_null());
  EXPECT_TRUE(lines[0]["kind"].is_null());
  EXPECT_TRUE(lines[0]["message"].is_null());

  Ran bad = shardcheck("check " + write("bad.json", kCollidingMap) + " --json");
  EXPECT_EQ(bad.exit_code, 1);
  lines = json_lines(bad.out);
  ASSERT_EQ(lines.size(), 1u) << bad.out;
  EXPECT_EQ(lines[0]["verdict"], "refused");
  EXPECT_EQ(lines[0]["kind"], "twice");
  EXPECT_EQ(lines[0]["rank"], 0);
  EXPECT_TRUE(lines[0]["piece"].is_number_integer());
  EXPECT_EQ(lines[0]["address"], 0);
  EXPECT_EQ(lines[0]["side"], "shard");
  EXPECT_TRUE(lines[0]["path"].is_null());
  // The message is the plain output's, after "refused twice: ".
  Ran plain = shardcheck("check " + write("bad2.json", kCollidingMap));
  EXPECT_EQ(plain.out, "refused twice: " + lines[0]["message"].get<std::string>() + "\n");
}

TEST_F(CliTest, CheckJsonEnvelopeAndExitCodes) {
  std::string envelope = R"({"version": 1, "params": {"a.weight": )" + kValidMap +
                         R"(, "b.bias": {"logical_shape": [4], "ranks": 7}, "c.weight": )" + kCollidingMap + "}}";
  Ran run = shardcheck("check --json " + write("env.json", envelope));
  EXPECT_EQ(run.exit_code, 1);
  auto lines = json_lines(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_EQ(lines[0]["param"], "a.weight");
  EXPECT_EQ(lines[0]["verdict"], "valid");
  EXPECT_EQ(lines[1]["param"], "b.bias");
  EXPECT_EQ(lines[1]["verdict"], "refused");
  EXPECT_EQ(lines[1]["kind"], "format");
  EXPECT_EQ(lines[1]["path"], R"($.params["b.bias"].ranks)");
  EXPECT_TRUE(lines[1]["rank"].is_null());
  EXPECT_EQ(lines[2]["param"], "c.weight");
  EXPECT_EQ(lines[2]["kind"], "twice");
  for (const auto& line : lines) EXPECT_EQ(line.size(), std::size(kCheckJsonKeys)) << line.dump();

  std::string all_valid = R"({"version": 1, "params": {"x": )" + kValidMap + "}}";
  Ran ok = shardcheck("check --json " + write("ok.json", all_valid));
  EXPECT_EQ(ok.exit_code, 0);
  lines = json_lines(ok.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["param"], "x");
  // Unreadable input keeps exit code 2 and prints nothing on stdout.
  Ran syntax = shardcheck("check --json " + write("syntax.json", R"({"logical_shape": [4],)"));
  EXPECT_EQ(syntax.exit_code, 2);
  EXPECT_EQ(syntax.out, "");
}

// --- --help covers every subcommand ----------------------------------------------------

TEST_F(CliTest, HelpCoversSubcommandsExitCodesAndOutputs) {
  Ran help = shardcheck("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* usage :
       {"  check MAP.json [--json]", "  repro CASE.json ", "  digest MAP.json ", "  digest CASE.json ",
        "  campaign [--seed S]", "  campaign --resume DIR", "findings/SIGNATURE.json", "report.json", "table.txt",
        "checkpoint.json", "--jobs 0 (the default) means one worker per core", "3 the outputs are incomplete",
        "130 stopped by SIGINT", "143 by SIGTERM", "campaign (and merge) also 3", "  plan SOURCE.json TARGET.json",
        "  reduce CASE.json --out FILE"}) {
    EXPECT_NE(help.out.find(usage), std::string::npos) << usage << "\n" << help.out;
  }
  // One "Exit:" line per subcommand (check, repro, digest, campaign, deepspeed, plan, reduce;
  // campaign merge's says it exits as the campaign), in the overview and in each
  // subcommand's own help.
  std::size_t exits = 0;
  for (std::size_t at = help.out.find("Exit: 0 "); at != std::string::npos; at = help.out.find("Exit: 0 ", at + 1)) {
    ++exits;
  }
  EXPECT_EQ(exits, 7u) << help.out;
  EXPECT_NE(help.out.find("  campaign merge DIR... --out DIR"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("  repro DIR [...] [--junit FILE]"), std::string::npos) << help.out;
  for (const char* sub : {"check", "repro", "digest", "campaign", "plan"}) {
    Ran own = shardcheck(std::string(sub) + " --help");
    EXPECT_EQ(own.exit_code, 0) << sub;
    EXPECT_NE(own.out.find(std::string("\n  ") + sub + " "), std::string::npos) << own.out;
    EXPECT_NE(own.out.find("Exit: 0 "), std::string::npos) << own.out;
  }
  Ran all = shardcheck("--help-all");
  EXPECT_EQ(all.exit_code, 0);
  EXPECT_NE(all.out.find("--case-memory-limit"), std::string::npos);
  EXPECT_NE(all.out.find("--scale-power"), std::string::npos);
}

// --- plan (contract 11) ----------------------------------------------------------------

TEST_F(CliTest, PlanPrintsASummaryThePlanOrTheRefusal) {
  const std::string source = write("tp2-columns.json", R"({"logical_shape": [2, 4], "ranks": {
    "0": {"shard_shape": [2, 2], "pieces": [{"shape": [2, 2], "source": [0, [4, 1]], "dest": [0, [2, 1]], "locations": [0]}]},
    "1": {"shard_shape": [2, 2], "pieces": [{"shape": [2, 2], "source": [2, [4, 1]], "dest": [0, [2, 1]], "locations": [1]}]}}})");
  const std::string target = write("tp1.json", R"({"logical_shape": [2, 4], "ranks": {
    "0": {"shard_shape": [2, 4], "pieces": [{"shape": [2, 4], "source": [0, [4, 1]], "dest": [0, [4, 1]], "locations": [0]}]}}})");
  Ran summary = shardcheck("plan " + source + " " + target);
  EXPECT_EQ(summary.exit_code, 0) << summary.out;
  EXPECT_NE(summary.out.find("plan: 2 segments, 8 elements (32 bytes) moved as float32"), std::string::npos)
      << summary.out;
  EXPECT_NE(summary.out.find("source rank 1 -> target rank 0: 4 elements (16 bytes)"), std::string::npos)
      << summary.out;
  Ran json = shardcheck("plan --json " + source + " " + target);
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find(R"({"shape":[2,2],"source":[1,0,[2,1]],"target":[0,2,[4,1]]})"), std::string::npos)
      << json.out;
  const std::string other_shape = write("other.json", R"({"logical_shape": [8], "ranks": {
    "0": {"shard_shape": [8], "pieces": [{"shape": [8], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})");
  Ran refused = shardcheck("plan " + source + " " + other_shape);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.out.rfind("refused shape: ", 0), 0u) << refused.out;
  Ran missing = shardcheck("plan " + source + " " + quoted((dir_ / "nope.json").string()));
  EXPECT_EQ(missing.exit_code, 2);
}

// --scale-power reaches the digest (contract 1.2): a scaled map's shards unscale for a
// parameter (p = 1) to F, whose digest is the unscaled map's, and an optimizer moment
// (p = -1) through a scaled map is refused, kind scale, at the scaled piece.
TEST_F(CliTest, DigestAppliesTheScalePowerGiven) {
  const std::string scaled = write("scaled.json", R"({"logical_shape": [2], "ranks": {
    "0": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0], "scale": 2.0}]}}})");
  const std::string plain = write("plain.json", R"({"logical_shape": [2], "ranks": {
    "0": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})");
  const std::string doubled = write("doubled.bin", floats({2, 4}));
  const std::string f = write("f.bin", floats({1, 2}));
  Ran unscaled = shardcheck("digest " + plain + " " + f);
  ASSERT_EQ(unscaled.exit_code, 0) << unscaled.out;
  const std::uint64_t want = hex_after(unscaled.out, "digest ");
  Ran param = shardcheck("digest " + scaled + " " + doubled + " --scale-power 1");
  EXPECT_EQ(param.exit_code, 0) << param.out;
  EXPECT_EQ(hex_after(param.out, "digest "), want) << param.out;
  Ran moment = shardcheck("digest " + scaled + " " + doubled + " --scale-power -1");
  EXPECT_EQ(moment.exit_code, 1) << moment.out;
  EXPECT_EQ(moment.out.rfind("refused scale: rank 0 piece 0 ", 0), 0u) << moment.out;
  EXPECT_NE(moment.out.find("scale_power is -1"), std::string::npos) << moment.out;
}

// --shard I/N wants 0 <= I < N: the index one past the last shard is a usage error, not
// a campaign of some other slice of the cases.
TEST_F(CliTest, CampaignShardIndexMustBeBelowTheCount) {
  const std::string out = " --cases 2 --seed 1 --jobs 1 --no-isolate --quiet --out " + quoted((dir_ / "out").string());
  for (const std::string shard : {"2/2", "3/2", "1/1", "0/0"}) {
    Ran run = shardcheck("campaign --shard " + shard + out, true);
    EXPECT_EQ(run.exit_code, 2) << shard << ": " << run.out;
    EXPECT_EQ(run.out, "shardcheck campaign: --shard wants I/N with 0 <= I < N, got '" + shard + "'\n") << run.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out" / "report.json"));
  int code = -1;
  nlohmann::json last = campaign_report(dir_ / "last", "--cases 2 --seed 1 --jobs 1 --shard 1/2", code);
  EXPECT_EQ(code, 0);
  ASSERT_TRUE(last.is_object());
}

// --compare-replicas reaches the planner: a source replicated on ranks 0 and 1 planned
// into one rank reads rank 0's copy and, asked, plans a comparison of rank 1's with it.
TEST_F(CliTest, PlanComparesReplicasOnlyWhenAsked) {
  const std::string source = write("replicated.json", R"({"logical_shape": [4], "ranks": {
    "0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0, 1]}]},
    "1": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0, 1]}]}}})");
  const std::string target = write("tp1.json", R"({"logical_shape": [4], "ranks": {
    "0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})");
  Ran plain = shardcheck("plan " + source + " " + target);
  EXPECT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_NE(plain.out.find("  read from source rank 0: 4 elements (16 bytes)\n"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("replica comparisons"), std::string::npos) << plain.out;
  Ran compared = shardcheck("plan --compare-replicas " + source + " " + target);
  EXPECT_EQ(compared.exit_code, 0) << compared.out;
  EXPECT_NE(compared.out.find("  replica comparisons: 1 segments\n"), std::string::npos) << compared.out;
  Ran json = shardcheck("plan --json --compare-replicas " + source + " " + target);
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find(R"("replica_checks":1)"), std::string::npos) << json.out;
}

// plan --dtype weighs the summary's bytes in that dtype (elements unchanged), and
// --max-segments is a budget: two segments fit a budget of 2, a budget of 1 refuses the
// whole plan (format, exit 1) rather than returning part of it (contract 11).
TEST_F(CliTest, PlanWeighsBytesInItsDtypeAndKeepsToItsSegmentBudget) {
  const std::string source = write("whole.json", R"({"logical_shape": [4], "ranks": {
    "0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})");
  const std::string target = write("halves.json", R"({"logical_shape": [4], "ranks": {
    "0": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]},
    "1": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [2, [1]], "dest": [0, [1]], "locations": [1]}]}}})");
  Ran f32 = shardcheck("plan " + source + " " + target);
  EXPECT_EQ(f32.exit_code, 0) << f32.out;
  EXPECT_NE(f32.out.find("plan: 2 segments, 4 elements (16 bytes) moved as float32\n"), std::string::npos) << f32.out;
  Ran bf16 = shardcheck("plan --dtype bfloat16 " + source + " " + target);
  EXPECT_EQ(bf16.exit_code, 0) << bf16.out;
  EXPECT_NE(bf16.out.find("plan: 2 segments, 4 elements (8 bytes) moved as bfloat16\n"), std::string::npos) << bf16.out;
  EXPECT_NE(bf16.out.find("  source rank 0 -> target rank 1: 2 elements (4 bytes)\n"), std::string::npos) << bf16.out;
  Ran fits = shardcheck("plan --max-segments 2 " + source + " " + target);
  EXPECT_EQ(fits.exit_code, 0) << fits.out;
  Ran over = shardcheck("plan --max-segments 1 " + source + " " + target);
  EXPECT_EQ(over.exit_code, 1) << over.out;
  EXPECT_NE(over.out.find("refused format: the transfer plan needs more than 1 address runs or segments, its budget"),
            std::string::npos)
      << over.out;
  EXPECT_EQ(over.out.find("segments, 4 elements"), std::string::npos) << over.out;
}

// --- cmake --install ---------------------------------------------------------------

TEST_F(CliTest, CmakeInstallPutsTheCommandInBin) {
  const fs::path build = fs::path(SHARDCHECK_BINARY).parent_path();
  const fs::path prefix = dir_ / "prefix";
  Ran install = [&] {
    std::string command = quoted(SHARDCHECK_CMAKE) + " --install " + quoted(build.string()) + " --prefix " +
                          quoted(prefix.string()) + " 2>&1";
    Ran run;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return run;
    char buffer[4096];
    std::size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
    int status = pclose(pipe);
    if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
    return run;
  }();
  ASSERT_EQ(install.exit_code, 0) << install.out;
  const fs::path installed = prefix / "bin" / "shardcheck";
  ASSERT_TRUE(fs::is_regular_file(installed)) << install.out;
  EXPECT_NE(fs::status(installed).permissions() & fs::perms::owner_exec, fs::perms::none);
  // Nothing but the command: no libraries, headers or test binaries.
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(prefix)) {
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), prefix).string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"bin/shardcheck"});
  // The installed copy is the same command.
  FILE* pipe = popen((quoted(installed.string()) + " --version").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[256] = {};
  const std::size_t n = fread(buffer, 1, sizeof buffer - 1, pipe);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(std::string(buffer, n), shardcheck("--version").out);
}

}  // namespace

namespace {

// `shardcheck deepspeed` runs on a Python that cannot import the package (here Debian's
// python3 without its site directories): a usage error that says what to run, not a
// traceback with exit 1 (issue 45).
TEST_F(CliTest, DeepspeedOnAPythonWithoutThePackageSaysWhatToRun) {
  const fs::path python = dir_ / "bare-python";
  std::ofstream(python) << "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n";
  fs::permissions(python, fs::perms::owner_all);
  const std::string command = "SHARDCHECK_PYTHON=" + quoted(python.string()) + " " + quoted(SHARDCHECK_BINARY) +
                              " deepspeed inspect " + quoted(dir_.string()) + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("cannot import the shardcheck package"), std::string::npos) << out;
  EXPECT_NE(out.find("bash scripts/campaign.sh"), std::string::npos) << out;
  EXPECT_EQ(out.find("Traceback"), std::string::npos) << out;
}

}  // namespace
