/* A run's package specs (issue 38): what a spec may be, checked wherever
 * one comes in (the service's request, `airlock run --package`, the
 * helper before it hands one to pip or npm). A spec is a name and a
 * version constraint only: no URL, no path, no git ref, no option. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "../util/util.h"

typedef enum al_pkg_lang {
    AL_PKG_PYTHON,
    AL_PKG_NODE,
    _AL_PKG_LANG_MAX,
} al_pkg_lang;

/* "python", "node" */
const char *al_pkg_lang_name(al_pkg_lang l);
/* by name: 0 and *RET, or -EINVAL */
int al_pkg_lang_from_name(const char *name, al_pkg_lang *ret);

/* What al_pkg_spec_check accepts, as the regular expressions a client is
 * shown (MCP's input schema): written once here, beside the checker */
#define AL_PKG_PYTHON_PATTERN "^[A-Za-z0-9][A-Za-z0-9._-]*(\\[[A-Za-z0-9,._-]+\\])?((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]+)?$"
#define AL_PKG_NODE_PATTERN "^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9.^~<>=*|+_ -]+)?$"

/* SPEC as a LANG spec: at most AL_JOB_PKG_SPEC_MAX (214) bytes matching
 * AL_PKG_PYTHON_PATTERN or AL_PKG_NODE_PATTERN. 0, or -EINVAL and why
 * (naming the spec) in ERR (step "packages"). */
int al_pkg_spec_check(al_pkg_lang lang, const char *spec, al_error *err);
/* The name a spec installs (python: before its extras or constraint;
 * node: before its version's @, a scope kept), in BUF (LEN bytes). */
void al_pkg_spec_name(al_pkg_lang lang, const char *spec, char *buf, size_t len);
