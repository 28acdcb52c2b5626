#include "lang.h"

#include <string.h>

#include "warm.h"

static const char *const py_ext[] = { ".py", NULL };
static const char *const node_ext[] = { ".js", ".mjs", ".cjs", NULL };
static const char *const sh_ext[] = { ".sh", ".bash", NULL };

static const al_lang langs[] = {
    { "python", "/usr/bin/python3", "main.py", py_ext },
    { "node", "/usr/bin/node", "main.js", node_ext },
    { "bash", "/bin/bash", "main.sh", sh_ext },
};

static const struct { const char *alias, *name; } aliases[] = {
    { "python3", "python" }, { "py", "python" }, { "javascript", "node" }, { "js", "node" },
    { "nodejs", "node" }, { "sh", "bash" }, { "shell", "bash" },
};

const al_lang *al_lang_by_name(const char *name) {
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0)
            name = aliases[i].name;
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++)
        if (strcmp(name, langs[i].name) == 0)
            return &langs[i];
    return NULL;
}

const al_lang *al_lang_by_file(const char *filename) {
    const char *dot = strrchr(filename, '.');
    if (!dot)
        return NULL;
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++)
        for (const char *const *e = langs[i].extensions; *e; e++)
            if (strcmp(dot, *e) == 0)
                return &langs[i];
    return NULL;
}

const char *al_lang_names(void) { return "python, node, bash"; }

static const char *warm_file(const char *name) {
    for (size_t i = 0; i < sizeof al_warm_starts / sizeof al_warm_starts[0]; i++)
        if (strcmp(al_warm_starts[i].name, name) == 0)
            return al_warm_starts[i].text;
    return NULL;
}

const char *al_lang_zygote(const al_lang *l) {
    return l && strcmp(l->name, "python") == 0 ? warm_file("zygote.py") : NULL;
}

const char *al_lang_warm_start(const al_lang *l) {
    /* by file name, the language's and its first extension: python.py is
     * Python's, node.js Node's */
    for (size_t i = 0; l && i < sizeof al_warm_starts / sizeof al_warm_starts[0]; i++)
        if (strncmp(al_warm_starts[i].name, l->name, strlen(l->name)) == 0 &&
            strcmp(al_warm_starts[i].name + strlen(l->name), l->extensions[0]) == 0)
            return al_warm_starts[i].text;
    return NULL;
}
