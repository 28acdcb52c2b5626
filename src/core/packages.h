/*
 * Packages in the service (issue 38): whether a run that asks for packages
 * is admitted, what it costs, a thread's package set (the union of what its
 * runs asked, read and written through the store), and the set a run's job
 * carries. The install itself is the helper's (drivers/helper_main.c); this
 * is the policy around it.
 */
#pragma once

#include <jansson.h>

#include "../drivers/job.h"
#include "../store/runs.h"
#include "run_spec.h"
#include "service.h"
#include "settings.h"

/* A package set: per language the specs (owned), in order, at most
 * AL_RUN_PACKAGES_MAX each; the layer they were installed into ("" none). */
typedef struct al_pkg_set {
    char **specs[_AL_PKG_LANG_MAX];
    size_t n[_AL_PKG_LANG_MAX];
    char layer[80];
    json_t *resolved[_AL_PKG_LANG_MAX]; /* what the layer holds, as the installer said (owned; NULL none) */
} al_pkg_set;

void al_pkg_set_free(al_pkg_set *set);
/* Whether SET holds any spec. */
bool al_pkg_set_any(const al_pkg_set *set);
/* SPEC (valid) into SET's list of L: a spec of the same name is replaced
 * (removed, and SPEC appended: the later wins). 0, -E2BIG when the list
 * would pass AL_RUN_PACKAGES_MAX, -ENOMEM. */
int al_pkg_set_put(al_pkg_set *set, al_pkg_lang l, const char *spec);
/* SET as {"python": [...], "node": [...]} (the layer and resolved lists
 * with WITH_LAYER). NULL out of memory. */
json_t *al_pkg_set_json(const al_pkg_set *set, bool with_layer);

/* Thread THREAD_ID of workspace WS_ID's set into *RET (empty for a thread
 * without one). 0 or -errno with ERR. */
int al_packages_of_thread(al_service *s, const char *ws_id, const char *thread_id, al_pkg_set *ret, al_error *err);

/* GET /v1/threads/{thread}/packages: thread THREAD_ID of WS_ID's set as
 * {"thread_id", "python", "node", "layer" (null: none yet), "resolved":
 * {"python", "node"}} (empty lists for a thread without one); NULL with
 * ERR when the store cannot say. */
json_t *al_packages_thread_view(al_service *s, const char *ws_id, const char *thread_id, al_error *err);

/* Whether SP (checked) may install its packages for P under ST: the
 * refusals of docs/api.md (package installs off, another driver, the
 * packages network not allowed, no installer image, a thread's set over
 * its cap), in that order. AL_STATUS_OK (and for a run asking none), or
 * the refusal with its code in *RET_CODE and its message in MSG. */
al_status al_packages_admit(al_service *s, const al_principal *p, const al_settings *st, const al_run_spec *sp,
                            const char **ret_code, char *msg, size_t msglen);

/* What the approval card of SP (checked; of workspace WS_ID) says of its
 * packages: {"python", "node": the set its run will install (the
 * thread's, with SP's asked over it), "asked": {"python", "node"}}; NULL
 * for a run that asks for none and whose thread has none. */
json_t *al_packages_card(al_service *s, const char *ws_id, const al_run_spec *sp);

/* REC (about to be recorded from SP, waiting for an approval) pinned to
 * the set its card shows: its inputs get "packages_pinned" ({"python",
 * "node"}), which its job installs instead of the thread's set as it is at
 * the start (a set the thread gains meanwhile is not installed unapproved,
 * as a document's newer version is not staged). 0 (nothing to pin too),
 * or -ENOMEM. */
int al_packages_pin(al_service *s, const al_run_spec *sp, al_store_run *rec);

/* The same for P's workspace, its settings read here (E2B's sandbox create,
 * which makes no run yet). */
al_status al_packages_admit_for(al_service *s, const al_principal *p, const al_run_spec *sp, const char **ret_code,
                                char *msg, size_t msglen);

/* What a run of SP (checked), P's, costs at price PRICE: a run that asks
 * for packages its thread's set does not hold yet (an install) pays the
 * install's time limit too, in the run's own time's price (PRICE *
 * ceil(package_install_timeout_s / the run's timeout_s) more); a run whose
 * packages its thread holds already (the layer is reused) pays PRICE. */
int64_t al_packages_price(al_service *s, const al_principal *p, const al_run_spec *sp, int64_t price);

/* RUN's packages into its job J: the packages it asked (its record's) over
 * its thread's set when the workspace's installs are on (a run of a thread
 * with a set gets the set, asking or not, so that it mounts the thread's
 * layer), and what the helper installs them with (the layers directory, the
 * installer image, the index and registry, the install box's network,
 * scripts and limits). Nothing for a run with no packages. 0, or -errno
 * with ERR (the installer image gone since admission: provisioning fails). */
int al_packages_job(al_service *s, const al_store_run *run, al_job *j, al_error *err);

/* RUN's packages installed (or their layer reused) as the helper said in
 * INSTALLED ({"layer", "python", "node", ...}): its thread's set becomes
 * J's, with that layer and what it resolved. 0 (and for a run without a
 * thread), or -errno with ERR. */
int al_packages_installed(al_service *s, const al_store_run *run, const al_job *j, json_t *installed, al_error *err);

/* A sandbox's METADATA's packages (key AL_SANDBOX_META_PACKAGES, a JSON
 * string of POST /v1/runs's `packages` object; NULL or no key: none) into
 * SP, each spec checked: every run of the sandbox asks for them, so its
 * thread's environment holds them from its first command on. AL_STATUS_OK,
 * or the refusal with its code in *CODE and message in MSG. */
al_status al_packages_of_metadata(json_t *metadata, al_run_spec *sp, char *msg, size_t msglen, const char **code);

/* What a failed install tells whoever reads a result: RESULT's error
 * message (pip's or npm's reason) when its reason is install_failed, else
 * NULL; the surfaces append AL_PACKAGES_FAILED_TELL to it, as the
 * refusals before an install tell what to do. */
const char *al_packages_install_failure(json_t *result);
#define AL_PACKAGES_FAILED_TELL "Tell the user so, and do not substitute something else"
