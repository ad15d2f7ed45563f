/* A 64-bit mix: splitmix64's finaliser, a bijection whose output bits all
 * depend on every input bit. Used wherever ids are derived without talking
 * (sub-gang context ids) and where a signature must differ in every bit
 * from its neighbours (flagged lines' flags). */
#ifndef GANG_CORE_MIX_H
#define GANG_CORE_MIX_H

#include <stdint.h>

static inline uint64_t gang__mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#endif
