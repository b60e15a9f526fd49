/* safetext.c: user text made safe for terminals and JSON files (safetext.h). */
#include "safetext.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length (2-4) of the well-formed UTF-8 sequence at s (n bytes left) that starts with a byte
 * of 0x80 or more, and its code point in *cp; 0 when it is not one (RFC 3629, table 3-7 of
 * Unicode). */
static int utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    int len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) len = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

void safetext_fputs(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) fprintf(f, "\\x%02x", c);
            else putc(c, f);
            i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_seq(p + i, n - i, &cp);
        if (len == 0 || (cp >= 0x80 && cp <= 0x9f)) { /* invalid, or a C1 control (CSI ...) */
            int k = len ? len : 1;
            for (int j = 0; j < k; j++) fprintf(f, "\\x%02x", p[i + j]);
            i += (size_t)k;
            continue;
        }
        fwrite(p + i, 1, (size_t)len, f);
        i += (size_t)len;
    }
}

void safetext_eprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) {
        fputs("vrsim: out of host memory\n", stderr);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    safetext_fputs(stderr, s);
    free(s);
}

char *safetext_utf8(const char *s, size_t n, size_t *out_len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t cap = n + 1, k = 0;
    char *o = malloc(cap);
    for (size_t i = 0; o && i < n;) {
        uint32_t cp;
        int len = p[i] < 0x80 ? 1 : utf8_seq(p + i, n - i, &cp);
        if (k + 5 > cap) { /* a sequence or U+FFFD, and the final NUL */
            cap = cap * 2 + 4;
            char *no = realloc(o, cap);
            if (!no) { free(o); return NULL; }
            o = no;
        }
        if (len) {
            memcpy(o + k, p + i, (size_t)len);
            k += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(o + k, "\xef\xbf\xbd", 3); /* U+FFFD */
            k += 3;
            i++;
        }
    }
    if (!o) return NULL;
    o[k] = 0;
    if (out_len) *out_len = k;
    return o;
}
