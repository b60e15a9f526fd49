/* catalog.h: the data modules of lua/hw/ (the GPU catalog hw.gpus, the prices hw.prices: plain
 * tables keyed by catalog name) read as data, for the commands that list or price the catalog
 * (vrsim shop, vrsim gpus). The module is loaded once in a sandboxed state by the binding
 * (sim/bind/catalog.c), and each entry's top-level fields that are numbers, strings or booleans
 * are copied out; nested tables (pcie, nvlink, kind, others) are not. */
#ifndef VR_CATALOG_H
#define VR_CATALOG_H

#include <stdbool.h>

#include "vr.h"

typedef enum CatalogKind { CATALOG_NUMBER, CATALOG_STRING, CATALOG_BOOL } CatalogKind;

typedef struct CatalogField {
    char *name;
    CatalogKind kind;
    double num;                /* CATALOG_NUMBER */
    char *str;                 /* CATALOG_STRING */
    bool b;                    /* CATALOG_BOOL */
} CatalogField;

typedef struct CatalogEntry {
    char *key;                 /* the catalog name: "h100_sxm" */
    CatalogField *fields;
    int n_fields;
} CatalogEntry;

typedef struct Catalog {
    CatalogEntry *entries;     /* sorted by key (byte order) */
    int n;
} Catalog;

/* Reads module (e.g. "hw.gpus"), which must return a table of tables keyed by strings, into
 * *out (the caller frees it with catalog_free). VR_EINVAL with the message in err when it cannot
 * be loaded or is not such a table, VR_ENOMEM without host memory. */
VrStatus catalog_read(const char *module, Catalog **out /* OUT */, char *err, size_t errlen);
void catalog_free(Catalog *c); /* NULL is a no-op */

/* The entry of key, or NULL when the catalog has none. */
const CatalogEntry *catalog_entry(const Catalog *c, const char *key);
/* Field name of entry e (NULL: none), or NULL when it has no such field (or one of a table). */
const CatalogField *catalog_field(const CatalogEntry *e, const char *name);

#endif
