// What the campaign makes of a case an implementation answered by a fallback
// (docs/protocol.md, `fallback`): silently wrong, counted under "<op>-after-fallback" in
// the operation row and in the finding's signature. Shared by the DeepSpeed targets' tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "shardcheck/case.h"
#include "shardcheck/properties.h"

namespace shardcheck {

inline void expect_silently_wrong_after_fallback(const Case& c, const std::string& target, Op op) {
  props::EvalOptions options;
  options.target = target;
  const props::Evaluation evaluation = props::evaluate_case(c, options);
  const std::string label = props::op_label(op, true);
  EXPECT_EQ(evaluation.category, Outcome::wrong) << c.name;
  ASSERT_EQ(evaluation.ops.size(), 1u) << c.name;
  EXPECT_EQ(evaluation.ops[0].label(), label) << c.name;
  ASSERT_TRUE(evaluation.finding) << c.name;
  EXPECT_EQ(evaluation.finding->signature.rfind("silently-wrong:" + label + ":", 0), 0u)
      << evaluation.finding->signature;
}

}  // namespace shardcheck
