// unique_handle: ownership moves with the handle, reset and release, the deleter runs exactly
// once per owned handle and never for null ones, for pointer-like and integer handles and for
// handles whose valid values include the null value.
#include "core/unique_handle.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

namespace ctforge::detail {
namespace {

/// Integer handles, null = -1, every negative value never owned (like hid_t).
struct int_traits {
  using handle_type = int;
  static inline std::vector<int> released;
  static constexpr int null() noexcept { return -1; }
  static bool is_null(int h) noexcept { return h < 0; }
  static void release(int h) noexcept { released.push_back(h); }
};

/// Pointer handles, null = nullptr (like cudaStream_t).
struct opaque {};
struct ptr_traits {
  using handle_type = opaque*;
  static inline std::vector<opaque*> released;
  static constexpr opaque* null() noexcept { return nullptr; }
  static void release(opaque* h) noexcept { released.push_back(h); }
};

/// Integer handles where 0 is a valid value (like a cuFFT plan): nothing is null by value.
struct zero_valid_traits {
  using handle_type = unsigned;
  static inline std::vector<unsigned> released;
  static constexpr unsigned null() noexcept { return 0; }
  static bool is_null(unsigned) noexcept { return false; }
  static void release(unsigned h) noexcept { released.push_back(h); }
};

using int_handle = unique_handle<int_traits>;
using ptr_handle = unique_handle<ptr_traits>;
using zero_valid_handle = unique_handle<zero_valid_traits>;

static_assert(!std::is_copy_constructible_v<int_handle>);
static_assert(!std::is_copy_assignable_v<int_handle>);
static_assert(std::is_nothrow_move_constructible_v<int_handle>);
static_assert(std::is_nothrow_move_assignable_v<int_handle>);

class UniqueHandle : public ::testing::Test {
 protected:
  void SetUp() override {
    int_traits::released.clear();
    ptr_traits::released.clear();
    zero_valid_traits::released.clear();
  }
};

TEST_F(UniqueHandle, DestructorReleasesAnOwnedHandleExactlyOnce) {
  {
    const int_handle h(7);
    EXPECT_TRUE(h.owns());
    EXPECT_TRUE(static_cast<bool>(h));
    EXPECT_EQ(h.get(), 7);
    EXPECT_TRUE(int_traits::released.empty());
  }
  EXPECT_EQ(int_traits::released, std::vector<int>{7});
}

TEST_F(UniqueHandle, NullHandlesAreNeverReleased) {
  {
    const int_handle empty;
    const int_handle invalid(-1);
    const int_handle negative(-5);
    const ptr_handle null_ptr(nullptr);
    EXPECT_FALSE(empty.owns());
    EXPECT_FALSE(invalid.owns());
    EXPECT_FALSE(negative.owns());
    EXPECT_FALSE(null_ptr.owns());
    EXPECT_EQ(empty.get(), -1);
    EXPECT_EQ(negative.get(), -5);  // the value is kept, only not owned
  }
  EXPECT_TRUE(int_traits::released.empty());
  EXPECT_TRUE(ptr_traits::released.empty());
}

TEST_F(UniqueHandle, MoveConstructionTransfersOwnership) {
  opaque o;
  {
    ptr_handle a(&o);
    ptr_handle b(std::move(a));
    EXPECT_FALSE(a.owns());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
    EXPECT_EQ(a.get(), nullptr);
    EXPECT_TRUE(b.owns());
    EXPECT_EQ(b.get(), &o);
    EXPECT_TRUE(ptr_traits::released.empty());
  }
  EXPECT_EQ(ptr_traits::released, std::vector<opaque*>{&o});
}

TEST_F(UniqueHandle, MoveAssignmentReleasesTheTargetsHandleFirst) {
  {
    int_handle a(1);
    int_handle b(2);
    b = std::move(a);
    EXPECT_EQ(int_traits::released, std::vector<int>{2});
    EXPECT_EQ(b.get(), 1);
    EXPECT_FALSE(a.owns());  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_EQ(int_traits::released, (std::vector<int>{2, 1}));
}

TEST_F(UniqueHandle, SelfMoveAssignmentKeepsTheHandle) {
  {
    int_handle a(3);
    int_handle& alias = a;
    a = std::move(alias);
    EXPECT_TRUE(a.owns());
    EXPECT_EQ(a.get(), 3);
    EXPECT_TRUE(int_traits::released.empty());
  }
  EXPECT_EQ(int_traits::released, std::vector<int>{3});
}

TEST_F(UniqueHandle, ResetReleasesAndAdopts) {
  int_handle h(4);
  h.reset(5);
  EXPECT_EQ(int_traits::released, std::vector<int>{4});
  EXPECT_EQ(h.get(), 5);
  EXPECT_TRUE(h.owns());
  h.reset();
  EXPECT_EQ(int_traits::released, (std::vector<int>{4, 5}));
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(h.get(), -1);
  h.reset();  // nothing owned: nothing released
  h.reset(-3);
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(int_traits::released, (std::vector<int>{4, 5}));
}

TEST_F(UniqueHandle, ReleaseGivesUpOwnershipWithoutTheDeleter) {
  int raw = 0;
  {
    int_handle h(9);
    raw = h.release();
    EXPECT_FALSE(h.owns());
    EXPECT_EQ(h.get(), -1);
  }
  EXPECT_EQ(raw, 9);
  EXPECT_TRUE(int_traits::released.empty());
}

TEST_F(UniqueHandle, AValidNullValueIsOwnedAndReleasedOnce) {
  {
    zero_valid_handle h(0u);
    EXPECT_TRUE(h.owns());
    zero_valid_handle moved(std::move(h));
    EXPECT_FALSE(h.owns());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(moved.owns());
  }
  EXPECT_EQ(zero_valid_traits::released, std::vector<unsigned>{0u});
  zero_valid_handle empty;  // default construction owns nothing even though 0 is valid
  EXPECT_FALSE(empty.owns());
}

TEST_F(UniqueHandle, ElementsOfAVectorAreReleasedOnceEachAcrossReallocation) {
  std::vector<int> expected;
  {
    std::vector<int_handle> v;
    for (int i = 0; i < 20; ++i) v.emplace_back(i);  // reallocations move the handles
    EXPECT_TRUE(int_traits::released.empty());
  }
  for (int i = 0; i < 20; ++i) expected.push_back(i);
  std::vector<int> released = int_traits::released;  // the order of destruction is unspecified
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, expected);
}

}  // namespace
}  // namespace ctforge::detail
