/* The kubeconfig and service-account reader beyond kube.h's
 * al_kube_cluster_load: the parse of a kubeconfig's text (the fuzz
 * target's entry), the token's re-read, the checks of names and URLs. */
#pragma once

#include "kube.h"

/* what a kubeconfig may be */
#define AL_KUBE_CONFIG_MAX (1u << 20)

/* TEXT (LEN bytes of a kubeconfig) into RET, as al_kube_cluster_load: paths
 * in it are relative to DIR; FILES false refuses any file it names (the
 * fuzz target reads none). ERR must be clear. 0, or -errno. */
int al_kube_cluster_parse(const char *text, size_t len, const char *dir, bool files, const char *namespace_,
                          al_kube_cluster *ret, al_error *err);
/* C's token read again from its token file (it rotates): 0 (also when C
 * has no token file), or -errno with why in ERR (the old token kept). */
int al_kube_token_reread(al_kube_cluster *c, al_error *err);
bool al_kube_valid_namespace(const char *s);
/* whether URL's host is loopback: 127.0.0.0/8, [::1], localhost */
bool al_kube_loopback_url(const char *url);
