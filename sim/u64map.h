/* u64map.h: a hash map from nonzero 64-bit keys to 64-bit values, for the hot lookups of the
 * allocator model (device address -> Block) and of the trace reader and replayer (trace address
 * or stream -> index).
 *
 * Data model: one array of cap {key, val} slots (a hit reads one cache line), open addressing
 * with linear probing from the key's home slot, key 0 marking an empty slot, and backward-shift
 * deletion, so there are no tombstones and every lookup ends at the key or at the first empty
 * slot. Invariants (u64map_check verifies every one):
 *   cap == 0 (then slots == NULL and n == 0)  or  cap is a power of two >= U64MAP_MIN_CAP
 *   2 n <= cap (load at most 1/2);   n == number of slots whose key != 0
 *   for each key k at slot i: every slot from u64map_home(k) to i (cyclically) holds a key, and
 *   none before i holds k (so each key is present once and a probe from its home finds it)
 * The first insertion allocates U64MAP_MIN_CAP slots; the array doubles when an insertion would
 * pass half full, and never shrinks (u64map_free releases it).
 *
 * U64Map is a small value struct, embedded where it is used (no allocation of its own, and a
 * zeroed U64Map is an empty map that uses the C library). Its fields are private to u64map.c and
 * to the inline functions below, which are inline because they are on the hot paths. */
#ifndef VR_U64MAP_H
#define VR_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vr.h"

/* Host allocator hook, shaped like lua_Alloc and AllocHostFn: nsize == 0 frees ptr (returns
 * NULL); otherwise returns a block of nsize bytes holding the first min(osize, nsize) bytes of
 * ptr, or NULL on failure. */
typedef void *(*U64MapHostFn)(void *ud, void *ptr, size_t osize, size_t nsize);

#define U64MAP_MIN_CAP ((size_t)1024) /* slots of the first array */

typedef struct U64MapSlot {
    uint64_t key;            /* 0 = empty */
    uint64_t val;
} U64MapSlot;

typedef struct U64Map {
    U64MapSlot *slots;       /* cap slots; NULL when cap == 0 */
    size_t cap;              /* slots: 0 or a power of two >= U64MAP_MIN_CAP */
    size_t n;                /* entries (slots whose key != 0) */
    U64MapHostFn host;       /* allocates slots; NULL = the C library */
    void *host_ud;           /* passed to host */
} U64Map;

/* Makes *m an empty map whose slots come from host(host_ud, ...) (NULL: the C library).
 * Allocates nothing; *m must hold no slots (a zeroed or freed map), else they leak. */
void u64map_init(U64Map *m, U64MapHostFn host, void *host_ud);

/* Frees m's slots (not m itself, which the caller owns): m is then empty, keeps its host
 * allocator, and may be used again. NULL is a no-op. */
void u64map_free(U64Map *m);

/* The home slot of key: bits 24.. of key * 2^64/phi (Fibonacci hashing), masked to cap.
 * m->cap must be > 0. */
static inline size_t u64map_home(const U64Map *m, uint64_t key)
{
    return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 24) & (m->cap - 1);
}

/* Whether key is in m; if so and val is not NULL, writes its value to *val. Key 0 is never in m. */
static inline bool u64map_get(const U64Map *m, uint64_t key, uint64_t *val /* OUT */)
{
    if (key == 0 || m->cap == 0)
        return false;
    for (size_t i = u64map_home(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i].key == key) {
            if (val)
                *val = m->slots[i].val;
            return true;
        }
        if (m->slots[i].key == 0)
            return false;
    }
}

/* Sets key -> val, replacing the value if key is present. VR_EINVAL for key 0 (the empty mark);
 * VR_ENOMEM when the slot array must grow and cannot, leaving m unchanged. Replacing a value never
 * allocates, and neither does inserting a key after u64map_reserve made room for it. */
VrStatus u64map_put(U64Map *m, uint64_t key, uint64_t val);

/* u64map_reserve's slow path: grows the slot array to hold n + extra entries. */
VrStatus u64map_grow(U64Map *m, size_t extra);

/* Makes room for `extra` more keys: until then, inserting up to `extra` new keys cannot fail
 * (for callers that must not fail half-way through a change). VR_ENOMEM leaves m unchanged. */
static inline VrStatus u64map_reserve(U64Map *m, size_t extra)
{
    return extra <= m->cap / 2 - m->n ? VR_OK : u64map_grow(m, extra);
}

/* Removes key; returns whether it was present. Frees nothing. */
bool u64map_del(U64Map *m, uint64_t key);

/* Removes every entry, keeping the slot array. */
void u64map_clear(U64Map *m);

/* Number of entries. */
size_t u64map_count(const U64Map *m);

/* Iteration in slot order: set *pos = 0, then each call writes one entry to *key and *val
 * (either may be NULL) and returns true, or returns false after the last. Changing m during an
 * iteration, other than replacing a value with u64map_put, makes the rest of it undefined. */
bool u64map_next(const U64Map *m, size_t *pos /* IN/OUT */, uint64_t *key /* OUT */,
                 uint64_t *val /* OUT */);

/* Checks every invariant above in O(cap): VR_OK, or VR_EINVAL when one is broken. */
VrStatus u64map_check(const U64Map *m);

#endif
