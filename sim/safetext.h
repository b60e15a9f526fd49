/* safetext.h: text from the user (a scenario's title, module and tensor names, a scenario's
 * path, an error a scenario raised) made safe to show: in a terminal, every control character
 * and every byte that is not part of valid UTF-8 is written as a visible escape ("\x1b"), so a
 * name cannot move the cursor, retitle the window or hide a line; in a JSON file, bytes that are
 * not valid UTF-8 become U+FFFD (the replacement character), as a decoder would show them. */
#ifndef VR_SAFETEXT_H
#define VR_SAFETEXT_H

#include <stdio.h>

/* Writes s to f with control characters but newline and tab, DEL, C1 controls and bytes of
 * invalid UTF-8 written as \xNN. */
void safetext_fputs(FILE *f, const char *s);

/* printf to stderr through safetext_fputs (the whole message, however long). */
void safetext_eprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The n bytes at s as a new NUL-terminated string of valid UTF-8: each byte that does not begin a
 * well-formed sequence (overlong forms, surrogates and code points past U+10FFFF included)
 * becomes U+FFFD. *out_len (when not NULL) receives its length. NULL when out of memory. */
char *safetext_utf8(const char *s, size_t n, size_t *out_len);

#endif
