// SmallVector against std::vector: the same operations, the same contents, whether the
// elements sit in place or on the heap (and across the move between the two). Run
// under AddressSanitizer in CI, which also sees any read or write past either storage.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "shardcheck/small_vector.h"
#include "shardcheck/types.h"

namespace {

using shardcheck::SmallVector;

template <class V>
std::vector<std::int64_t> contents(const V& v) {
  return std::vector<std::int64_t>(v.begin(), v.end());
}

// One step of a random program, applied to both.
template <std::size_t N>
void apply_step(int op, std::int64_t value, std::size_t where, SmallVector<std::int64_t, N>& small,
                std::vector<std::int64_t>& model) {
  const std::size_t at = model.empty() ? 0 : where % (model.size() + 1);
  switch (op) {
    case 0:
      small.push_back(value);
      model.push_back(value);
      break;
    case 1:
      if (!model.empty()) {
        small.pop_back();
        model.pop_back();
      }
      break;
    case 2:
      small.resize(where % 11);
      model.resize(where % 11);
      break;
    case 3:
      small.resize(where % 11, value);
      model.resize(where % 11, value);
      break;
    case 4:
      small.insert(small.begin() + static_cast<std::ptrdiff_t>(at), value);
      model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), value);
      break;
    case 5: {
      // A range out of the vector itself, which the insertion moves.
      const std::size_t n = model.size() - at;
      const std::size_t take = n == 0 ? 0 : 1 + static_cast<std::size_t>(value + 5) % n;
      const std::vector<std::int64_t> copied(model.begin() + static_cast<std::ptrdiff_t>(at),
                                             model.begin() + static_cast<std::ptrdiff_t>(at + take));
      small.insert(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(at),
                   small.begin() + static_cast<std::ptrdiff_t>(at + take));
      model.insert(model.begin(), copied.begin(), copied.end());
      break;
    }
    case 6:
      if (at < model.size()) {
        small.erase(small.begin() + static_cast<std::ptrdiff_t>(at));
        model.erase(model.begin() + static_cast<std::ptrdiff_t>(at));
      }
      break;
    case 7:
      small.assign(where % 9, value);
      model.assign(where % 9, value);
      break;
    case 8: {
      SmallVector<std::int64_t, N> copy(small);
      small = std::move(copy);
      EXPECT_TRUE(copy.empty());  // NOLINT: moved-from is empty, by this class's contract
      break;
    }
    case 9: {
      SmallVector<std::int64_t, N> other{value, value + 1};
      other.swap(small);
      EXPECT_EQ(contents(small), (std::vector<std::int64_t>{value, value + 1}));
      small.swap(other);
      break;
    }
    case 10:
      small.push_back(small.empty() ? value : small.front());  // an element of its own
      model.push_back(model.empty() ? value : model.front());
      break;
    case 11: {
      // Copy assignment into vectors that already hold elements, in place or on the heap
      // (the storage is shared between the two, so each direction is its own path).
      SmallVector<std::int64_t, N> target(where % 9, value);
      target = small;
      EXPECT_EQ(contents(target), model);
      SmallVector<std::int64_t, N> longer(where % 9 + N, value);
      small = longer;
      small = target;
      break;
    }
    default:
      small.clear();
      model.clear();
      break;
  }
}

template <std::size_t N>
void random_program() {
  const auto steps = *rc::gen::container<std::vector<std::tuple<int, std::int64_t, std::size_t>>>(
      rc::gen::tuple(rc::gen::inRange(0, 13), rc::gen::inRange<std::int64_t>(-5, 1000),
                     rc::gen::inRange<std::size_t>(0, 40)));
  SmallVector<std::int64_t, N> small;
  std::vector<std::int64_t> model;
  for (const auto& [op, value, where] : steps) {
    apply_step<N>(op, value, where, small, model);
    RC_ASSERT(contents(small) == model);
    RC_ASSERT(small.size() == model.size());
    RC_ASSERT(small.capacity() >= small.size());
    const SmallVector<std::int64_t, N> copied = small;
    RC_ASSERT(copied == small);
    RC_ASSERT((copied <=> small) == std::strong_ordering::equal);
  }
}

RC_GTEST_PROP(SmallVectorRc, FourInPlaceBehavesAsAVector, ()) { random_program<4>(); }
RC_GTEST_PROP(SmallVectorRc, OneInPlaceBehavesAsAVector, ()) { random_program<1>(); }

TEST(SmallVector, InPlaceUpToItsCapacityThenOnTheHeap) {
  SmallVector<std::int64_t, 4> v{1, 2, 3, 4};
  const std::int64_t* inside = v.data();
  EXPECT_EQ(v.capacity(), 4u);
  EXPECT_GE(inside, reinterpret_cast<const std::int64_t*>(&v));
  EXPECT_LT(inside, reinterpret_cast<const std::int64_t*>(&v + 1));
  v.push_back(5);
  EXPECT_GE(v.capacity(), 5u);
  EXPECT_TRUE(v.data() < reinterpret_cast<const std::int64_t*>(&v) ||
              v.data() >= reinterpret_cast<const std::int64_t*>(&v + 1));
  EXPECT_EQ(contents(v), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));

  // A move takes the heap block; the source is left empty and usable.
  const std::int64_t* block = v.data();
  SmallVector<std::int64_t, 4> moved(std::move(v));
  EXPECT_EQ(moved.data(), block);
  EXPECT_TRUE(v.empty());  // NOLINT(bugprone-use-after-move): the contract says empty
  v.push_back(7);
  EXPECT_EQ(contents(v), (std::vector<std::int64_t>{7}));
}

TEST(SmallVector, OrdersAndComparesAsAVectorDoes) {
  using V = SmallVector<std::int64_t, 2>;
  const std::vector<std::vector<std::int64_t>> values = {{}, {0}, {0, 0}, {0, 1}, {1}, {1, 0, 0, 0}, {2}};
  for (const auto& a : values) {
    for (const auto& b : values) {
      const V x(a.begin(), a.end());
      const V y(b.begin(), b.end());
      EXPECT_EQ(x == y, a == b);
      EXPECT_EQ(x < y, a < b);
      EXPECT_EQ(x == b, a == b);
    }
  }
}

TEST(SmallVector, ExtentsConvertFromAVectorAndReadAsASpan) {
  const std::vector<std::int64_t> shape{4, 5, 6, 7, 8};
  const shardcheck::Extents extents = shape;
  const std::span<const std::int64_t> view = extents;
  EXPECT_EQ(std::vector<std::int64_t>(view.begin(), view.end()), shape);
  EXPECT_EQ(shardcheck::checked_numel(extents), 4 * 5 * 6 * 7 * 8);
}

}  // namespace
