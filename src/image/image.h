/*
 * Runtime images: a root filesystem tree stored under the digest of its
 * canonical manifest, so a run names exactly the tree it ran on and
 * `verify` detects any change to it.
 *
 * Layout in the store (DIR, e.g. /var/lib/airlock/images):
 *   DIR/sha256-<hex>/rootfs/      the tree
 *   DIR/sha256-<hex>/manifest     one line per entry (see al_image_manifest)
 *   DIR/sha256-<hex>/info.json    what it holds, when it was made, from what
 *   DIR/aliases/<name>            a file holding "sha256:<hex>"
 */
#pragma once

#include <jansson.h>

#include "../box/runtime.h"
#include "../util/util.h"

#define AL_IMAGE_MAX_ENTRIES 2000000
#define AL_IMAGE_MAX_DEPTH 64

/* Manifest of the tree at ROOTFD: sorted lines
 *   <escaped path> <type f|d|l> <mode octal> <size> <sha256 or -> <escaped link target or ->
 * and its sha256 in RET_DIGEST (64 hex). */
/* Total bytes (and, if RET_ENTRIES, entries) a manifest's text lists. */
json_int_t al_image_manifest_bytes(const char *text, json_int_t *ret_entries);

int al_image_manifest(int rootfd, char **ret_text, size_t *ret_len, char ret_digest[65], al_error *err);

/* The images directory of a state directory. */
void al_image_dir(const char *state_dir, char *buf, size_t len);
/* Make the images directory, and the state directory above it when missing
 * (0700: the store and its database live there). */
int al_image_dir_make(const char *images_dir, al_error *err);

/* Store the tree at SRC (a directory on the same file system as the store:
 * it is renamed in) with INFO; returns the digest. The same tree twice is
 * one image. */
int al_image_commit(const char *images_dir, const char *src, json_t *info, char ret_digest[65], al_error *err);

/* "default", "sha256:<hex>" or "<hex>" -> the image's directory, which
 * holds the image's tree (rootfs): -ENOENT, named, for a reference entry. */
int al_image_resolve(const char *images_dir, const char *name, char *ret_dir, size_t len, char ret_digest[65],
                     al_error *err);
/* The same for a driver that runs an image by its registry reference
 * (oci.json's manifest digest) and never reads the tree: a reference entry
 * (info.json, manifest, oci.json; no rootfs) resolves too. */
int al_image_resolve_ref(const char *images_dir, const char *name, char *ret_dir, size_t len, char ret_digest[65],
                         al_error *err);
/* NAME is one an alias may be (and a bundled recipe's): at most 64
 * characters, no '/', not starting with '.', not a digest. */
bool al_image_name_ok(const char *name);
int al_image_alias(const char *images_dir, const char *alias, const char *digest, al_error *err);
/* Recompute the manifest of an image; 1 when it matches, 0 when not (with
 * the first differing line in ERR's message). */
int al_image_verify(const char *image_dir, const char *digest, al_error *err);
/* Whether the image in IMAGE_DIR came in by `airlock image import` (its
 * files a tenant's, not a recipe's), or cannot be told: true then. */
bool al_image_imported(const char *image_dir);
int al_image_remove(const char *images_dir, const char *digest, al_error *err);
/* Every image: [{digest, aliases, size, created, holds}]. */
json_t *al_image_list(const char *images_dir);
/* What an entry of al_image_list says its image holds, on one line for a
 * person: "Debian 13.8 (trixie), python 3.13.5, node 20.19.2 (fpdf2 2.8.3,
 * numpy 2.2.4, ...)"; "python -, node -" when it records nothing (an import).
 * Control bytes of the recorded strings are shown as '?'. */
void al_image_holds_line(json_t *entry, char *buf, size_t len);

/* Import a docker save / OCI layout tarball; nothing is left on failure. */
int al_image_import(const char *images_dir, const char *tarball, char ret_digest[65], al_error *err);

/* A runtime for the image at IMAGE_DIR (kept by the caller while it runs). */
typedef struct al_image_runtime {
    al_runtime rt;
    char root[4096];
    char digest[72];
    char seed[4400];
} al_image_runtime;
void al_image_runtime_init(al_image_runtime *ir, const char *image_dir, const char *digest);
