// Philox4x32-10 against the known-answer vectors of Random123 (DEShawResearch/random123,
// tests/kat_vectors, the three "philox4x32 10" lines: counter, key, expected output), and the
// rounding-word keying of docs/working_state.md.
#include <gtest/gtest.h>

#include "core/working_state/philox.h"

using namespace statecheck;

namespace {
void expect_block(Philox4x32Counter c, Philox4x32Key k, Philox4x32Counter want) {
  const Philox4x32Counter got = philox4x32_10(c, k);
  EXPECT_EQ(got.c0, want.c0);
  EXPECT_EQ(got.c1, want.c1);
  EXPECT_EQ(got.c2, want.c2);
  EXPECT_EQ(got.c3, want.c3);
}
}  // namespace

TEST(Philox4x32_10, KnownAnswerZeros) {
  expect_block({0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
}

TEST(Philox4x32_10, KnownAnswerAllOnes) {
  expect_block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
               {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
}

TEST(Philox4x32_10, KnownAnswerPiDigits) {
  expect_block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
               {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST(RoundingKey, FieldsOfTheSpec) {
  const uint64_t seed = 0x0123456789ABCDEFull;
  const Philox4x32Key k = rounding_key(seed, 3, 5);
  EXPECT_EQ(k.k0, 0x89ABCDEFu);
  EXPECT_EQ(k.k1, 0x01234567u ^ (3u << 16) ^ 5u);
}

TEST(RoundingWord, ElementPicksItsWordOfTheBlock) {
  const Philox4x32Key k = rounding_key(42, 1, 2);
  // Elements 8..11 share counter (2, token, sequence, 0) and take words 0..3 of its block.
  const Philox4x32Counter block = philox4x32_10({2, 7, 9, 0}, k);
  EXPECT_EQ(rounding_word(k, 8, 7, 9), block.c0);
  EXPECT_EQ(rounding_word(k, 9, 7, 9), block.c1);
  EXPECT_EQ(rounding_word(k, 10, 7, 9), block.c2);
  EXPECT_EQ(rounding_word(k, 11, 7, 9), block.c3);
  // A different token, sequence or head gives a different word (with overwhelming probability;
  // these fixed values were checked to differ).
  EXPECT_NE(rounding_word(k, 8, 8, 9), block.c0);
  EXPECT_NE(rounding_word(k, 8, 7, 10), block.c0);
  EXPECT_NE(rounding_word(rounding_key(42, 1, 3), 8, 7, 9), block.c0);
}

TEST(RoundingUniform, ExactGridInUnitInterval) {
  EXPECT_EQ(rounding_uniform(0u), 0.0f);
  EXPECT_EQ(rounding_uniform(0xFFu), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(rounding_uniform(0x100u), 0x1.0p-24f);
  EXPECT_EQ(rounding_uniform(0xFFFFFFFFu), 1.0f - 0x1.0p-24f);
}
