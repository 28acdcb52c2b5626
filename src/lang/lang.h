/* The language table: how each language's script is named and started. */
#pragma once

#include <stddef.h>

typedef struct al_lang {
    const char *name;
    const char *interpreter;      /* absolute path inside the box */
    const char *default_file;     /* the script's name in /work for -c */
    const char *const *extensions;
} al_lang;

const al_lang *al_lang_by_name(const char *name);
/* By the file name's extension; NULL when unknown. */
const al_lang *al_lang_by_file(const char *filename);
/* The source of L's warm start (src/lang/warm/: the script a pooled box
 * runs before its run is known), or NULL when L has none. */
const char *al_lang_warm_start(const al_lang *l);
/* The source of L's fork server (src/lang/warm/zygote.py, beside the warm
 * start in a zygote's /work as ZYGOTE_MODULE.py), or NULL when L has none. */
#define AL_LANG_ZYGOTE_MODULE "_airlock_zygote"
const char *al_lang_zygote(const al_lang *l);
/* "python, node, bash" for messages. */
const char *al_lang_names(void);
