// Backend differential checks: every available backend against the CPU reference
// module on generated cases. The CUDA part needs a device: without one it is reported
// as skipped, never as passed; the CUDA code itself is still compiled when the toolkit
// is present.
#include <gtest/gtest.h>

#include "shardcheck/campaign.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/oracles/backends.h"

namespace shardcheck {
namespace {

TEST(Backends, CpuIsAlwaysFirst) {
  auto backends = oracles::available_backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front()->name(), "cpu");
}

// The executor must be able to fail: a backend that flips one bit is caught.
class FlippingBackend final : public Backend {
 public:
  std::string_view name() const override { return "flipping"; }
  void copy_block(DType dtype, const BlockCopy& copy) override {
    cpu_->copy_block(dtype, copy);
    if (copy.shape->empty() || (*copy.shape)[0] > 0) copy.to[copy.to_view.offset * element_size(dtype)] ^= std::byte{1};
  }
  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    return cpu_->compare_block(dtype, copy);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST(Backends, ExecutorReportsADifferentBackend) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  backends.push_back(std::make_unique<FlippingBackend>());
  campaign::Options options;
  options.generate.corrupt_probability = 0.0;
  int found = 0;
  for (Index i = 0; i < 200; ++i) {
    if (auto difference = oracles::compare_backends(campaign::generate_indexed_case(options, i), backends)) {
      EXPECT_EQ(difference->signature.rfind("backend:flipping-vs-cpu:", 0), 0u) << difference->signature;
      ++found;
    }
  }
  EXPECT_GT(found, 100);
}

TEST(Backends, CudaAgreesWithCpuOnGeneratedCases) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without the CUDA toolkit";
  auto backends = oracles::available_backends();
  if (backends.size() < 2) GTEST_SKIP() << "CUDA backend compiled, but no CUDA device is present";
  campaign::Options options;
  options.seed = 11;
  for (Index i = 0; i < 3000; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    auto difference = oracles::compare_backends(c, backends);
    ASSERT_FALSE(difference) << difference->signature << "\n" << difference->message << "\n"
                             << encode_case_text(c);
  }
}

}  // namespace
}  // namespace shardcheck
