/* test_u64map.c: the hash map of sim/u64map.h: insert, lookup, overwrite, backward-shift deletion
 * (slot by slot, across the end of the array too), growth past the first array, many keys against
 * a reference model, key 0 refused, iteration and clear, and host allocation failure leaving the
 * map unchanged. u64map_check runs after every step; every slot array goes through a counting
 * hook, and teardown proves all of them were freed. The deletion tests read m->slots, private to
 * u64map.c elsewhere, to see where the backward shift put each entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "u64map.h"

typedef struct Fixture {
    U64Map m;
    long allocs;       /* slot arrays allocated */
    long live;         /* slot arrays not yet freed */
    size_t live_bytes; /* their bytes */
    long fail_from;    /* allocations numbered >= this fail; -1 = none fail */
} Fixture;

static void *hook(void *ud, void *ptr, size_t osize, size_t nsize)
{
    Fixture *f = ud;
    if (nsize == 0) {
        if (ptr) {
            f->live--;
            f->live_bytes -= osize;
        }
        free(ptr);
        return NULL;
    }
    assert_null(ptr); /* the map never reallocates in place */
    if (f->fail_from >= 0 && f->allocs >= f->fail_from)
        return NULL;
    void *p = malloc(nsize);
    if (p) {
        memset(p, 0xA5, nsize); /* garbage: the map must clear what it uses */
        f->allocs++;
        f->live++;
        f->live_bytes += nsize;
    }
    return p;
}

static int setup(void **state)
{
    Fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->fail_from = -1;
    u64map_init(&f->m, hook, f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    u64map_free(&f->m);
    int leaked = f->live != 0 || f->live_bytes != 0;
    free(f);
    return leaked ? -1 : 0;
}

#define CHECK_MAP(m) assert_int_equal(u64map_check(m), VR_OK)

static void assert_has(const U64Map *m, uint64_t key, uint64_t want)
{
    uint64_t got = ~want;
    assert_true(u64map_get(m, key, &got));
    assert_true(got == want);
}

/* A key whose home slot (at the map's current capacity) is `home`, the `nth` such key found. */
static uint64_t key_at_home(const U64Map *m, size_t home, int nth)
{
    for (uint64_t k = 1;; k++)
        if (u64map_home(m, k) == home && nth-- == 0)
            return k;
}

static void test_empty_map(void **state)
{
    Fixture *f = *state;
    U64Map zero;
    memset(&zero, 0, sizeof zero); /* a zeroed map is empty and usable, with the C library */
    CHECK_MAP(&zero);
    assert_false(u64map_get(&zero, 42, NULL));
    assert_false(u64map_del(&zero, 42));
    assert_int_equal(u64map_count(&zero), 0);
    size_t pos = 0;
    assert_false(u64map_next(&zero, &pos, NULL, NULL));
    u64map_clear(&zero);
    assert_int_equal(u64map_put(&zero, 42, 7), VR_OK);
    assert_has(&zero, 42, 7);
    CHECK_MAP(&zero);
    u64map_free(&zero);
    assert_int_equal(u64map_count(&zero), 0);
    assert_false(u64map_get(&zero, 42, NULL));
    CHECK_MAP(&zero);
    u64map_free(NULL);

    /* init allocates nothing; neither do lookups and deletions on the empty map */
    assert_false(u64map_get(&f->m, 1, NULL));
    assert_false(u64map_del(&f->m, 1));
    assert_int_equal(f->allocs, 0);
}

static void test_insert_lookup_overwrite(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_put(m, 0x7f0000000000u, 11), VR_OK);
    assert_int_equal(f->allocs, 1);
    assert_int_equal(m->cap, U64MAP_MIN_CAP);
    assert_int_equal(u64map_put(m, 1, 0), VR_OK);                    /* value 0 is a value */
    assert_int_equal(u64map_put(m, UINT64_MAX, UINT64_MAX), VR_OK);  /* so are the extremes */
    assert_int_equal(u64map_count(m), 3);
    CHECK_MAP(m);
    assert_has(m, 0x7f0000000000u, 11);
    assert_has(m, 1, 0);
    assert_has(m, UINT64_MAX, UINT64_MAX);
    assert_true(u64map_get(m, 1, NULL)); /* val may be NULL */
    assert_false(u64map_get(m, 2, NULL));
    assert_false(u64map_get(m, 0x7f0000000200u, NULL));

    /* overwrite: same count, new value, no allocation */
    assert_int_equal(u64map_put(m, 0x7f0000000000u, 12), VR_OK);
    assert_int_equal(u64map_put(m, 1, 99), VR_OK);
    assert_int_equal(u64map_count(m), 3);
    assert_has(m, 0x7f0000000000u, 12);
    assert_has(m, 1, 99);
    assert_int_equal(f->allocs, 1);
    CHECK_MAP(m);
}

static void test_key_zero_refused(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_put(m, 0, 5), VR_EINVAL);
    assert_int_equal(u64map_count(m), 0);
    assert_int_equal(f->allocs, 0);
    for (uint64_t k = 1; k <= 100; k++)
        assert_int_equal(u64map_put(m, k, k), VR_OK);
    /* 0 marks empty slots: it must match none of them */
    assert_int_equal(u64map_put(m, 0, 5), VR_EINVAL);
    assert_false(u64map_get(m, 0, NULL));
    assert_false(u64map_del(m, 0));
    assert_int_equal(u64map_count(m), 100);
    for (uint64_t k = 1; k <= 100; k++)
        assert_has(m, k, k);
    CHECK_MAP(m);
}

/* Three keys of one home slot h fill h, h+1, h+2; deleting the first shifts the other two back,
 * leaving no tombstone; an entry at its own home slot is not moved. */
static void test_delete_backward_shift(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_reserve(m, 1), VR_OK);
    const size_t h = 100;
    uint64_t a = key_at_home(m, h, 0), b = key_at_home(m, h, 1), c = key_at_home(m, h, 2);
    uint64_t d = key_at_home(m, h + 3, 0); /* home just past the run */
    assert_int_equal(u64map_put(m, a, 1), VR_OK);
    assert_int_equal(u64map_put(m, b, 2), VR_OK);
    assert_int_equal(u64map_put(m, c, 3), VR_OK);
    assert_int_equal(u64map_put(m, d, 4), VR_OK);
    assert_true(m->slots[h].key == a && m->slots[h + 1].key == b && m->slots[h + 2].key == c);
    assert_true(m->slots[h + 3].key == d);
    CHECK_MAP(m);

    assert_true(u64map_del(m, a));
    assert_false(u64map_del(m, a));
    assert_true(m->slots[h].key == b && m->slots[h].val == 2);
    assert_true(m->slots[h + 1].key == c && m->slots[h + 1].val == 3);
    assert_true(m->slots[h + 2].key == 0); /* the hole moved to the end of the run */
    assert_true(m->slots[h + 3].key == d); /* at its home: stays */
    assert_int_equal(u64map_count(m), 3);
    assert_false(u64map_get(m, a, NULL));
    assert_has(m, b, 2);
    assert_has(m, c, 3);
    assert_has(m, d, 4);
    CHECK_MAP(m);

    /* deleting the middle of a run: c (now at h+1) leaves b at h */
    assert_int_equal(u64map_put(m, a, 5), VR_OK); /* goes to the first empty slot: h+2 */
    assert_true(m->slots[h + 2].key == a);
    assert_true(u64map_del(m, c));
    assert_true(m->slots[h].key == b && m->slots[h + 1].key == a && m->slots[h + 2].key == 0);
    assert_has(m, a, 5);
    assert_has(m, b, 2);
    CHECK_MAP(m);

    /* a key whose home is h+1 sits at h+1 after a delete at h: it does not move into h */
    uint64_t e = key_at_home(m, h + 1, 0);
    assert_true(u64map_del(m, b));
    assert_true(u64map_del(m, a));
    assert_true(m->slots[h].key == 0 && m->slots[h + 1].key == 0);
    assert_int_equal(u64map_put(m, b, 6), VR_OK);
    assert_int_equal(u64map_put(m, e, 7), VR_OK);
    assert_true(m->slots[h].key == b && m->slots[h + 1].key == e);
    assert_true(u64map_del(m, b));
    assert_true(m->slots[h].key == 0 && m->slots[h + 1].key == e);
    assert_has(m, e, 7);
    assert_has(m, d, 4);
    assert_int_equal(u64map_count(m), 2);
    CHECK_MAP(m);
}

/* A run that starts in the last slot wraps to slot 0; deleting its head shifts across the end. */
static void test_delete_wraps_around(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_reserve(m, 1), VR_OK);
    const size_t last = m->cap - 1;
    uint64_t k[4];
    for (int i = 0; i < 3; i++)
        k[i] = key_at_home(m, last, i);
    k[3] = key_at_home(m, 0, 0); /* home 0, pushed to slot 2 by the wrapped run */
    for (int i = 0; i < 4; i++)
        assert_int_equal(u64map_put(m, k[i], (uint64_t)i + 10), VR_OK);
    assert_true(m->slots[last].key == k[0] && m->slots[0].key == k[1] && m->slots[1].key == k[2]);
    assert_true(m->slots[2].key == k[3]);
    CHECK_MAP(m);
    assert_true(u64map_del(m, k[0]));
    assert_true(m->slots[last].key == k[1] && m->slots[0].key == k[2]);
    assert_true(m->slots[1].key == k[3]); /* its home 0 is not in (1, 2]: it moves too */
    assert_true(m->slots[2].key == 0);
    for (int i = 1; i < 4; i++)
        assert_has(m, k[i], (uint64_t)i + 10);
    CHECK_MAP(m);
    assert_true(u64map_del(m, k[1]));
    assert_true(u64map_del(m, k[2]));
    assert_true(m->slots[last].key == 0 && m->slots[0].key == k[3] && m->slots[1].key == 0);
    assert_has(m, k[3], 13);
    CHECK_MAP(m);
}

/* Load stays at most 1/2: entry 513 doubles the first 1024 slots, and so on; every key survives
 * each rehash, and the old arrays are freed (teardown counts). */
static void test_growth(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    const uint64_t base = (uint64_t)1 << 40;
    for (uint64_t i = 0; i < U64MAP_MIN_CAP / 2; i++)
        assert_int_equal(u64map_put(m, base + i * 512, i), VR_OK);
    assert_int_equal(m->cap, U64MAP_MIN_CAP);
    assert_int_equal(f->allocs, 1);
    CHECK_MAP(m);
    assert_int_equal(u64map_put(m, base + (U64MAP_MIN_CAP / 2) * 512, 512), VR_OK);
    assert_int_equal(m->cap, 2 * U64MAP_MIN_CAP);
    assert_int_equal(f->allocs, 2);
    assert_int_equal(f->live, 1);
    CHECK_MAP(m);
    const uint64_t n = 40000;
    for (uint64_t i = U64MAP_MIN_CAP / 2 + 1; i < n; i++)
        assert_int_equal(u64map_put(m, base + i * 512, i), VR_OK);
    assert_int_equal(u64map_count(m), n);
    assert_int_equal(m->cap, 131072); /* smallest power of two >= 2 n */
    assert_int_equal(f->live, 1);
    CHECK_MAP(m);
    for (uint64_t i = 0; i < n; i++)
        assert_has(m, base + i * 512, i);
    assert_false(u64map_get(m, base + n * 512, NULL));
    assert_false(u64map_get(m, base + 256, NULL));
}

/* Random puts, overwrites, deletions and lookups of small integers, 512-aligned addresses and
 * scattered 64-bit keys, against plain arrays; the map grows well past its first array. */
static void test_many_keys_against_reference(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    enum { N = 60000 };
    static uint64_t keys[N], vals[N];
    static bool present[N];
    for (uint64_t i = 0; i < N; i++) {
        keys[i] = i % 3 == 0   ? i / 3 + 1                                         /* 1, 2, ... */
                  : i % 3 == 1 ? (uint64_t)0x7f0000000000 - (i / 3) * 512           /* addresses */
                               : (i + 1) * UINT64_C(0xD6E8FEB86659FD93);            /* scattered */
        present[i] = false;
    }
    uint32_t x = 2463534242u; /* xorshift32 */
    size_t count = 0;
    for (long step = 0; step < 400000; step++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        size_t i = x % N;
        uint32_t op = (x >> 20) % 8;
        if (op < 4) { /* put (insert or overwrite) */
            uint64_t v = ((uint64_t)x << 32) | (uint64_t)step;
            assert_int_equal(u64map_put(m, keys[i], v), VR_OK);
            count += !present[i];
            present[i] = true;
            vals[i] = v;
        } else if (op < 6) {
            assert_int_equal(u64map_del(m, keys[i]), present[i]);
            count -= present[i];
            present[i] = false;
        } else {
            uint64_t v;
            bool got = u64map_get(m, keys[i], &v);
            assert_int_equal(got, present[i]);
            if (got)
                assert_true(v == vals[i]);
        }
        assert_int_equal(u64map_count(m), count);
        if (step % 50000 == 0)
            CHECK_MAP(m);
    }
    CHECK_MAP(m);
    assert_true(m->cap >= 16 * U64MAP_MIN_CAP);
    for (size_t i = 0; i < N; i++) {
        uint64_t v;
        assert_int_equal(u64map_get(m, keys[i], &v), present[i]);
        if (present[i])
            assert_true(v == vals[i]);
    }
    /* delete everything: the map is empty, with no tombstones left to slow lookups */
    for (size_t i = 0; i < N; i++)
        assert_int_equal(u64map_del(m, keys[i]), present[i]);
    assert_int_equal(u64map_count(m), 0);
    for (size_t s = 0; s < m->cap; s++)
        assert_true(m->slots[s].key == 0);
    CHECK_MAP(m);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void test_iterate_and_clear(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    enum { N = 3000 };
    for (uint64_t k = 1; k <= N; k++)
        assert_int_equal(u64map_put(m, k * 4096, k * 7), VR_OK);
    static uint64_t seen[N + 1];
    size_t n = 0, pos = 0;
    uint64_t k, v;
    while (u64map_next(m, &pos, &k, &v)) {
        assert_true(n < N);
        assert_true(v == k / 4096 * 7);
        seen[n++] = k;
    }
    assert_int_equal(n, N);
    assert_false(u64map_next(m, &pos, &k, &v)); /* stays finished */
    qsort(seen, n, sizeof *seen, cmp_u64);
    for (size_t i = 0; i < n; i++)
        assert_true(seen[i] == (i + 1) * 4096); /* each key exactly once */

    /* overwriting values during an iteration is allowed */
    pos = 0;
    while (u64map_next(m, &pos, &k, NULL))
        assert_int_equal(u64map_put(m, k, 1), VR_OK);
    assert_has(m, 4096, 1);

    size_t cap = m->cap;
    long allocs = f->allocs;
    u64map_clear(m);
    assert_int_equal(u64map_count(m), 0);
    assert_int_equal(m->cap, cap);
    assert_false(u64map_get(m, 4096, NULL));
    pos = 0;
    assert_false(u64map_next(m, &pos, NULL, NULL));
    CHECK_MAP(m);
    for (uint64_t j = 1; j <= N; j++) /* refilling the kept array allocates nothing */
        assert_int_equal(u64map_put(m, j, j), VR_OK);
    assert_int_equal(f->allocs, allocs);
    CHECK_MAP(m);
}

/* reserve(k) then k insertions with every host allocation failing: all succeed. */
static void test_reserve_then_insert_cannot_fail(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_reserve(m, 0), VR_OK);
    assert_int_equal(f->allocs, 0);
    assert_int_equal(u64map_reserve(m, 700), VR_OK);
    assert_int_equal(m->cap, 2048);
    f->fail_from = f->allocs;
    for (uint64_t k = 1; k <= 700; k++)
        assert_int_equal(u64map_put(m, k * 512, k), VR_OK);
    assert_int_equal(u64map_put(m, 701 * 512, 701), VR_OK); /* still room: 701 <= 2048/2 */
    CHECK_MAP(m);
    for (uint64_t k = 702; k <= 1024; k++)
        assert_int_equal(u64map_put(m, k * 512, k), VR_OK);
    /* now exactly half full: the next new key needs a bigger array, and cannot have it */
    assert_int_equal(u64map_reserve(m, 1), VR_ENOMEM);
    assert_int_equal(u64map_reserve(m, 0), VR_OK);
    assert_int_equal(u64map_reserve(m, SIZE_MAX), VR_ENOMEM);
    assert_int_equal(m->cap, 2048);
}

/* Host failure while growing leaves the map exactly as it was; replacing still works. */
static void test_enomem_leaves_map_unchanged(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    f->fail_from = 0;
    assert_int_equal(u64map_put(m, 5, 5), VR_ENOMEM); /* the first array */
    assert_int_equal(u64map_count(m), 0);
    assert_null(m->slots);
    CHECK_MAP(m);
    f->fail_from = -1;
    for (uint64_t k = 1; k <= U64MAP_MIN_CAP / 2; k++)
        assert_int_equal(u64map_put(m, k, k * 3), VR_OK);
    f->fail_from = f->allocs;
    U64MapSlot *slots = m->slots;
    assert_int_equal(u64map_put(m, 100000, 1), VR_ENOMEM);
    assert_true(m->slots == slots);
    assert_int_equal(m->cap, U64MAP_MIN_CAP);
    assert_int_equal(u64map_count(m), U64MAP_MIN_CAP / 2);
    assert_false(u64map_get(m, 100000, NULL));
    assert_int_equal(u64map_put(m, 7, 70), VR_OK); /* present: no allocation needed */
    assert_has(m, 7, 70);
    assert_true(u64map_del(m, 7)); /* and deletion frees room without allocating */
    assert_int_equal(u64map_put(m, 100000, 1), VR_OK);
    for (uint64_t k = 1; k <= U64MAP_MIN_CAP / 2; k++)
        if (k != 7)
            assert_has(m, k, k * 3);
    assert_has(m, 100000, 1);
    CHECK_MAP(m);
    f->fail_from = -1;
    assert_int_equal(u64map_put(m, 100001, 2), VR_OK);
    assert_int_equal(m->cap, 2 * U64MAP_MIN_CAP);
    CHECK_MAP(m);
}

/* u64map_check notices a broken map (a key cut off from its home by an empty slot, a wrong count). */
static void test_check_finds_damage(void **state)
{
    Fixture *f = *state;
    U64Map *m = &f->m;
    assert_int_equal(u64map_reserve(m, 1), VR_OK);
    uint64_t a = key_at_home(m, 10, 0), b = key_at_home(m, 10, 1);
    assert_int_equal(u64map_put(m, a, 1), VR_OK);
    assert_int_equal(u64map_put(m, b, 2), VR_OK);
    CHECK_MAP(m);
    m->n++;
    assert_int_equal(u64map_check(m), VR_EINVAL);
    m->n--;
    m->slots[10].key = 0; /* what a deletion without the backward shift would leave */
    m->n--;
    assert_int_equal(u64map_check(m), VR_EINVAL);
    assert_false(u64map_get(m, b, NULL)); /* the reason it matters */
    m->slots[10].key = a;
    m->n++;
    CHECK_MAP(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_map, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insert_lookup_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_zero_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_backward_shift, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_wraps_around, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_keys_against_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_then_insert_cannot_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enomem_leaves_map_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finds_damage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
