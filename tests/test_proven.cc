// The proof hand-off (core/src/proven.h, internal): what check_map gives conversion's
// wide path in place of visits it would otherwise derive again. White-box: a wrong
// order or a wrong fact here is a wrong error or an unguarded copy there.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "proven.h"
#include "shardcheck/campaign.h"
#include "shardcheck/checks.h"
#include "shardcheck/map.h"

namespace {

using namespace shardcheck;

std::vector<detail::ProvenPiece> proven_of(const Map& map, Status& status) {
  std::vector<detail::ProvenPiece> out;
  status = detail::check_map_proving(map, CheckOptions{}, [&](const detail::ProvenPiece& p) { out.push_back(p); });
  return out;
}

Map reversed(const Map& map) {
  Map out = map;
  std::reverse(out.ranks.begin(), out.ranks.end());
  for (auto& entry : out.ranks) std::reverse(entry.pieces.begin(), entry.pieces.end());
  return out;
}

// Every piece once, ranks by id, pieces in content order (written index last), with the
// facts span_facts gives and the shard size the map gives; and the same sequence of
// pieces however the map lists them.
void expect_proof_of_valid_map(const Map& map, const std::string& context) {
  Status status;
  const auto proven = proven_of(map, status);
  ASSERT_TRUE(status.ok()) << context;
  std::size_t pieces = 0;
  for (const auto& entry : map.ranks) pieces += entry.pieces.size();
  ASSERT_EQ(proven.size(), pieces) << context;
  for (std::size_t i = 0; i < proven.size(); ++i) {
    const detail::ProvenPiece& p = proven[i];
    const RankEntry* entry = map.find_rank(p.rank);
    ASSERT_NE(entry, nullptr) << context;
    ASSERT_EQ(&entry->pieces[static_cast<std::size_t>(p.written)], p.piece) << context << " piece " << i;
    const auto source = span_facts(p.piece->shape, p.piece->source);
    const auto dest = span_facts(p.piece->shape, p.piece->dest);
    ASSERT_TRUE(source && dest) << context;
    EXPECT_EQ(p.numel, source->numel) << context;
    EXPECT_EQ(p.source_max, source->max_address) << context;
    EXPECT_EQ(p.dest_max, dest->max_address) << context;
    EXPECT_EQ(p.shard_numel, checked_numel(*entry->shard_shape).value()) << context;
    if (i == 0) continue;
    const detail::ProvenPiece& q = proven[i - 1];
    ASSERT_LE(q.rank, p.rank) << context;
    if (q.rank == p.rank) {
      EXPECT_FALSE(content_less(*p.piece, *q.piece)) << context << " piece " << i;
      if (!content_less(*q.piece, *p.piece)) {
        EXPECT_LT(q.written, p.written) << context;
      }
    }
  }
  const Map other = reversed(map);
  const auto again = proven_of(other, status);
  ASSERT_TRUE(status.ok()) << context;
  ASSERT_EQ(again.size(), proven.size()) << context;
  for (std::size_t i = 0; i < proven.size(); ++i) {
    EXPECT_EQ(again[i].rank, proven[i].rank) << context;
    EXPECT_EQ(*again[i].piece, *proven[i].piece) << context << " piece " << i;
  }
}

// A valid map hands over every piece in visiting order (above); a map check_map refuses
// hands nothing over, and the refusal is check_map's own.
TEST(ProofHandOff, GeneratedMaps) {
  campaign::Options options;
  options.seed = 5;
  int valid = 0;
  int refused = 0;
  for (Index i = 0; i < 1000; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    const std::string context = "case " + std::to_string(i) + "\n" + describe(c.map);
    const Status want = check_map(c.map);
    if (want.ok()) {
      ++valid;
      expect_proof_of_valid_map(c.map, context);
    } else {
      ++refused;
      Status status;
      EXPECT_TRUE(proven_of(c.map, status).empty()) << context;
      ASSERT_FALSE(status.ok()) << context;
      EXPECT_EQ(status.error(), want.error()) << context;
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(valid, 50);
  EXPECT_GT(refused, 50);
}

}  // namespace
