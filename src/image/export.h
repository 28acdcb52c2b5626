/*
 * `airlock image export`: a runtime image as an OCI image layout (or its tar
 * archive), deterministic, so the same image always has the same manifest
 * digest and a cluster can pull it by that digest. airlock-server's (it
 * links libarchive and zlib), like import.
 */
#pragma once

#include "image.h"

typedef enum al_export_format {
    AL_EXPORT_OCI,                /* a directory: oci-layout, index.json, blobs/sha256/ */
    AL_EXPORT_OCI_ARCHIVE,        /* the same as one uncompressed tar file */
} al_export_format;

typedef struct al_export_result {
    char manifest_digest[72];     /* "sha256:<64 hex>" */
    char config_digest[72];
    char diff_id[72];             /* of the one layer, uncompressed */
    uint64_t layer_bytes;         /* compressed */
} al_export_result;

/* A box image's user (nobody): the sandbox pods' runAsUser. Another user
 * (the server image's 10001) makes an image that is not a box: its
 * WorkingDir is / (a box's is /work). */
#define AL_EXPORT_BOX_USER 65534u

/* Export the image at IMAGE_DIR (al_image_resolve's directory) to OUT, a
 * path that must not exist yet (nothing is left there on failure), and
 * record {manifest_digest, config_digest, exported_at} in IMAGE_DIR/oci.json
 * (written atomically). USER is the image config's User (not 0). */
int al_image_export(const char *image_dir, const char *out, al_export_format format, uint32_t user,
                    al_export_result *res, al_error *err);
