/* jsonin.h: the JSON vrsim reads from users (Hugging Face and DeepSpeed configs, validation
 * records, snapshot traces), parsed by cJSON and then held to what leaves no doubt about the
 * value it means:
 *   - nothing but white space after the value (Python's json.loads refuses trailing data; cJSON
 *     alone stops at the end of the first value and ignores the rest);
 *   - no \u0000 in any string: cJSON keeps C strings, so "num_hidden_layers\u0000x" would become
 *     the key "num_hidden_layers" and override the real one;
 *   - no key twice in one object: Python keeps the last, cJSON's lookups the first, so a config
 *     read by both would mean two things. A duplicate is an error, naming the key. */
#ifndef VR_JSONIN_H
#define VR_JSONIN_H

#include <stddef.h>

#include "vr.h"

struct cJSON;

/* Parses the len bytes at text (need not be NUL-terminated) as above. On VR_OK *out is the
 * value (the caller frees it with cJSON_Delete). On VR_EINVAL *out is NULL and err holds what
 * is wrong, without a file name: "not valid JSON (line 3)", "trailing data after the JSON value
 * (line 5)", "a string holds \u0000, a NUL character (line 2)", "key 'a.b' appears twice".
 * VR_ENOMEM when host memory ran out. */
VrStatus jsonin_parse(const char *text, size_t len, struct cJSON **out /* OUT */, char *err,
                      size_t errlen);

/* The checks of jsonin_parse on a value v that cJSON_ParseWithLengthOpts already parsed from
 * the len bytes at text, stopping at end (its return_parse_end): for a reader that words cJSON's
 * own syntax errors itself. VR_OK, VR_EINVAL with err as above, or VR_ENOMEM. */
VrStatus jsonin_check(const char *text, size_t len, const struct cJSON *v, const char *end,
                      char *err, size_t errlen);

#endif
