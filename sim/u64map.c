/* u64map.c: the hash map of u64map.h (open addressing, linear probing, backward-shift deletion).
 *
 * The home slot (u64map_home) takes bits 24.. of key * 2^64/phi: small integers (stream numbers),
 * runs of 512-byte-aligned block addresses and segment bases 2 MiB apart all spread evenly over
 * the slots, which neither the product's top bits nor dropping the key's low 9 bits do for all
 * three. At load <= 1/2 a lookup reads 1.2 to 1.4 slots on average over the allocator traces of
 * validation/traces. */
#include "u64map.h"

#include <stdlib.h>
#include <string.h>

/* The slot holding k, or the empty slot where k would go. m->cap > 0, k != 0. */
static inline size_t find(const U64Map *m, uint64_t k)
{
    size_t i = u64map_home(m, k);
    while (m->slots[i].key != k && m->slots[i].key != 0)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void *host_calloc(const U64Map *m, size_t n)
{
    if (!m->host)
        return calloc(n, sizeof(U64MapSlot));
    void *p = m->host(m->host_ud, NULL, 0, n * sizeof(U64MapSlot));
    if (p)
        memset(p, 0, n * sizeof(U64MapSlot));
    return p;
}

static void host_release(const U64Map *m, U64MapSlot *p, size_t n)
{
    if (!m->host)
        free(p);
    else if (p)
        m->host(m->host_ud, p, n * sizeof(U64MapSlot), 0);
}

void u64map_init(U64Map *m, U64MapHostFn host, void *host_ud)
{
    *m = (U64Map){NULL, 0, 0, host, host_ud};
}

void u64map_free(U64Map *m)
{
    if (!m)
        return;
    host_release(m, m->slots, m->cap);
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

VrStatus u64map_grow(U64Map *m, size_t extra)
{
    if (extra > SIZE_MAX / 4 - m->n)
        return VR_ENOMEM;
    size_t need = (m->n + extra) * 2;
    if (need <= m->cap)
        return VR_OK;
    size_t ncap = m->cap ? m->cap : U64MAP_MIN_CAP;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / sizeof(U64MapSlot))
            return VR_ENOMEM;
        ncap *= 2;
    }
    U64MapSlot *ns = host_calloc(m, ncap);
    if (!ns)
        return VR_ENOMEM;
    U64Map old = *m;
    m->slots = ns;
    m->cap = ncap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key)
            m->slots[find(m, old.slots[i].key)] = old.slots[i];
    host_release(m, old.slots, old.cap);
    return VR_OK;
}

VrStatus u64map_put(U64Map *m, uint64_t key, uint64_t val)
{
    if (key == 0)
        return VR_EINVAL;
    size_t i;
    if (m->cap) {
        i = find(m, key);
        if (m->slots[i].key == key) {
            m->slots[i].val = val;
            return VR_OK;
        }
        if (m->n >= m->cap / 2) { /* one more would pass half full */
            if (u64map_grow(m, 1) != VR_OK)
                return VR_ENOMEM;
            i = find(m, key);
        }
    } else {
        if (u64map_grow(m, 1) != VR_OK)
            return VR_ENOMEM;
        i = find(m, key);
    }
    m->slots[i] = (U64MapSlot){key, val};
    m->n++;
    return VR_OK;
}

bool u64map_del(U64Map *m, uint64_t key)
{
    if (key == 0 || m->cap == 0)
        return false;
    size_t mask = m->cap - 1;
    size_t i = find(m, key);
    if (m->slots[i].key == 0)
        return false;
    m->n--;
    /* Backward shift: the hole at i may take each later entry of the run whose home slot is not
     * in (i, j] cyclically (an entry whose home is in (i, j] would no longer be found). */
    for (size_t j = (i + 1) & mask; m->slots[j].key != 0; j = (j + 1) & mask) {
        size_t h = u64map_home(m, m->slots[j].key);
        bool stays = (i <= j) ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    return true;
}

void u64map_clear(U64Map *m)
{
    if (m->cap)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->n = 0;
}

size_t u64map_count(const U64Map *m)
{
    return m->n;
}

bool u64map_next(const U64Map *m, size_t *pos, uint64_t *key, uint64_t *val)
{
    for (size_t i = *pos; i < m->cap; i++)
        if (m->slots[i].key) {
            if (key)
                *key = m->slots[i].key;
            if (val)
                *val = m->slots[i].val;
            *pos = i + 1;
            return true;
        }
    *pos = m->cap;
    return false;
}

VrStatus u64map_check(const U64Map *m)
{
    if (m->cap == 0)
        return m->n == 0 && m->slots == NULL ? VR_OK : VR_EINVAL;
    if (m->cap < U64MAP_MIN_CAP || (m->cap & (m->cap - 1)) || !m->slots || m->n * 2 > m->cap)
        return VR_EINVAL;
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t k = m->slots[i].key;
        if (k == 0)
            continue;
        n++;
        /* the probe from k's home reaches slot i without an empty slot or another copy of k */
        if (find(m, k) != i)
            return VR_EINVAL;
    }
    return n == m->n ? VR_OK : VR_EINVAL;
}
